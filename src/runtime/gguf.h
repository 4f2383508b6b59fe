// GGUF reader: versions 2 and 3, every metadata type (nested arrays included), tensor
// infos and alignment. The file is memory-mapped and never copied; strings, arrays and
// tensor data are views into the mapping, valid as long as the GgufFile lives.
//
// Nothing in the file is trusted: every count, length, offset, dimension and
// `offset + size` is checked against the bytes that remain and against overflow before
// use, so a hostile file yields an InvalidArgument status naming the problem and its
// byte offset, never a crash, a hang or a huge allocation.
#ifndef HETERO_RUNTIME_GGUF_H_
#define HETERO_RUNTIME_GGUF_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/runtime/mapped_file.h"
#include "src/runtime/tensor_type.h"

namespace hetero {

// Metadata value types; the ids are part of the file format.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

absl::string_view GgufValueTypeName(GgufValueType type);

struct GgufArray;

// One metadata value. Scalars are held decoded; strings and arrays point into the file.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  bool is_integer() const;
  bool is_float() const { return type_ == GgufValueType::kFloat32 || type_ == GgufValueType::kFloat64; }

  // Conversions that fail (InvalidArgument) when the type or the value does not fit.
  absl::StatusOr<uint64_t> ToUint64() const;   // any integer type, value >= 0
  absl::StatusOr<int64_t> ToInt64() const;     // any integer type, value <= INT64_MAX
  absl::StatusOr<double> ToDouble() const;     // float or integer types
  absl::StatusOr<bool> ToBool() const;
  absl::StatusOr<absl::string_view> ToString() const;
  absl::StatusOr<const GgufArray*> ToArray() const;

 private:
  friend class GgufParser;
  GgufValueType type_ = GgufValueType::kUint8;
  uint64_t bits_ = 0;  // integer, bool or floating value, sign-/zero-extended or widened
  absl::string_view string_;
  std::shared_ptr<const GgufArray> array_;
};

// An array value. Primitive elements stay in the file (little-endian, possibly unaligned)
// and are read with Get<T>(); strings and nested arrays are decoded at parse time.
struct GgufArray {
  GgufValueType element_type;
  uint64_t size;
  absl::Span<const uint8_t> raw;          // primitive element types
  std::vector<absl::string_view> strings;  // element_type == kString
  std::vector<GgufValue> arrays;          // element_type == kArray

  // Element `i` of a primitive array; T must have the element type's size.
  template <typename T>
  T Get(uint64_t i) const {
    T value;
    std::memcpy(&value, raw.data() + i * sizeof(T), sizeof(T));
    return value;
  }
};

struct GgufKeyValue {
  absl::string_view key;
  GgufValue value;
};

struct GgufTensorInfo {
  absl::string_view name;
  std::vector<int64_t> dims;  // ne[0] (contiguous) first, as in ggml
  TensorType type;
  uint64_t offset;      // from the start of the data section
  uint64_t n_elements;
  uint64_t n_bytes;
  uint64_t file_offset;  // where the tensor's data starts in the file
  absl::Span<const uint8_t> data;
};

// A file-supplied name made safe for messages: non-printable bytes escaped as \xNN, cut
// after 128 bytes.
std::string PrintableName(absl::string_view s);

class GgufFile {
 public:
  // Maps and parses the file at `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  // Parses bytes the caller keeps alive for the GgufFile's lifetime (tests, fuzzers).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(absl::Span<const uint8_t> bytes,
                                                         std::string source_name = "<memory>");

  const std::string& source_name() const { return source_name_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const GgufValue* FindValue(absl::string_view key) const;

  // Typed look-ups: NotFound when the key is absent, InvalidArgument on a type mismatch;
  // messages name the key.
  absl::StatusOr<absl::string_view> GetString(absl::string_view key) const;
  absl::StatusOr<uint64_t> GetUint64(absl::string_view key) const;
  absl::StatusOr<uint32_t> GetUint32(absl::string_view key) const;
  absl::StatusOr<double> GetDouble(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<const GgufArray*> GetArray(absl::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // For bytes of a mapped file: drops their pages from the resident set (MappedFile's
  // hint). Does nothing for caller-owned bytes.
  void AdviseUnneeded(absl::Span<const uint8_t> range) const {
    if (file_ != nullptr) file_->AdviseUnneeded(range);
  }
  const GgufTensorInfo* FindTensor(absl::string_view name) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::unique_ptr<MappedFile> file_;  // null when parsing caller-owned bytes
  absl::Span<const uint8_t> bytes_;
  std::string source_name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  absl::flat_hash_map<absl::string_view, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<absl::string_view, size_t> tensor_index_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_GGUF_H_
