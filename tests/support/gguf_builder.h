// Writes GGUF files for tests: valid ones (tiny models) and, through the recorded byte
// layout, precise places to corrupt.
#ifndef HETERO_TESTS_SUPPORT_GGUF_BUILDER_H_
#define HETERO_TESTS_SUPPORT_GGUF_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "src/runtime/gguf.h"
#include "src/runtime/tensor_type.h"

namespace hetero::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  GgufBuilder& AddUint8(const std::string& key, uint8_t v);
  GgufBuilder& AddInt8(const std::string& key, int8_t v);
  GgufBuilder& AddUint16(const std::string& key, uint16_t v);
  GgufBuilder& AddInt16(const std::string& key, int16_t v);
  GgufBuilder& AddUint32(const std::string& key, uint32_t v);
  GgufBuilder& AddInt32(const std::string& key, int32_t v);
  GgufBuilder& AddUint64(const std::string& key, uint64_t v);
  GgufBuilder& AddInt64(const std::string& key, int64_t v);
  GgufBuilder& AddFloat32(const std::string& key, float v);
  GgufBuilder& AddFloat64(const std::string& key, double v);
  GgufBuilder& AddBool(const std::string& key, bool v);
  GgufBuilder& AddString(const std::string& key, const std::string& v);
  GgufBuilder& AddStringArray(const std::string& key, const std::vector<std::string>& v);
  GgufBuilder& AddInt32Array(const std::string& key, const std::vector<int32_t>& v);
  GgufBuilder& AddFloat32Array(const std::string& key, const std::vector<float>& v);
  // A SentencePiece ("llama") vocabulary: its tokens, scores and token types, with
  // tokens 0, 1 and 2 as unknown, BOS and EOS.
  GgufBuilder& AddSpmVocabulary(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                                const std::vector<int32_t>& types);
  // Any value: the type id and the encoded payload exactly as they will appear.
  GgufBuilder& AddRaw(const std::string& key, uint32_t type_id, std::vector<uint8_t> payload);

  // Sets general.alignment (as uint32) and pads tensor data to it.
  GgufBuilder& SetAlignment(uint32_t alignment);

  // A tensor whose data is `data` (its size is not checked, so tests can lie).
  GgufBuilder& AddTensor(const std::string& name, std::vector<int64_t> dims, TensorType type,
                         std::vector<uint8_t> data);
  GgufBuilder& AddTensorF32(const std::string& name, std::vector<int64_t> dims,
                            const std::vector<float>& values);

  struct TensorInfoLayout {
    size_t begin;         // name length field
    size_t n_dims_field;
    size_t dims_field;    // first dimension
    size_t type_field;
    size_t offset_field;
    size_t data;          // absolute file offset of the tensor's bytes
  };
  struct Layout {
    size_t tensor_count_field = 8;
    size_t kv_count_field = 16;
    std::vector<size_t> kv_begin;  // each key's length field
    std::vector<size_t> kv_type_field;
    std::vector<TensorInfoLayout> tensors;
    size_t tensor_infos_end = 0;
    size_t data_begin = 0;
  };

  std::vector<uint8_t> Build(Layout* layout = nullptr) const;

 private:
  struct KeyValue {
    std::string key;
    uint32_t type_id;
    std::vector<uint8_t> payload;
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    TensorType type;
    std::vector<uint8_t> data;
  };

  uint32_t version_;
  uint64_t alignment_ = 32;
  std::vector<KeyValue> kvs_;
  std::vector<Tensor> tensors_;
};

// Little-endian encoders for hand-made payloads.
void AppendU32(std::vector<uint8_t>& out, uint32_t v);
void AppendU64(std::vector<uint8_t>& out, uint64_t v);
void AppendString(std::vector<uint8_t>& out, const std::string& s);
void PutU32(std::vector<uint8_t>& bytes, size_t offset, uint32_t v);
void PutU64(std::vector<uint8_t>& bytes, size_t offset, uint64_t v);

// Writes `bytes` to a fresh file under the test temp directory and returns its path.
std::string WriteTempFile(const std::vector<uint8_t>& bytes, const std::string& name);

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_GGUF_BUILDER_H_
