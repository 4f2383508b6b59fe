#include "tests/support/gguf_builder.h"

#include <cstring>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <system_error>

#include "gtest/gtest.h"

namespace hetero::testing {
namespace {

template <typename T>
std::vector<uint8_t> Encode(T v) {
  std::vector<uint8_t> out(sizeof(T));
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}

constexpr uint32_t Id(GgufValueType t) { return static_cast<uint32_t>(t); }

}  // namespace

void AppendU32(std::vector<uint8_t>& out, uint32_t v) {
  const size_t at = out.size();
  out.resize(at + 4);
  std::memcpy(out.data() + at, &v, 4);
}

void AppendU64(std::vector<uint8_t>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + 8);
  std::memcpy(out.data() + at, &v, 8);
}

void AppendString(std::vector<uint8_t>& out, const std::string& s) {
  AppendU64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void PutU32(std::vector<uint8_t>& bytes, size_t offset, uint32_t v) {
  std::memcpy(bytes.data() + offset, &v, 4);
}

void PutU64(std::vector<uint8_t>& bytes, size_t offset, uint64_t v) {
  std::memcpy(bytes.data() + offset, &v, 8);
}

GgufBuilder& GgufBuilder::AddRaw(const std::string& key, uint32_t type_id, std::vector<uint8_t> payload) {
  kvs_.push_back({key, type_id, std::move(payload)});
  return *this;
}

GgufBuilder& GgufBuilder::AddUint8(const std::string& k, uint8_t v) { return AddRaw(k, Id(GgufValueType::kUint8), Encode(v)); }
GgufBuilder& GgufBuilder::AddInt8(const std::string& k, int8_t v) { return AddRaw(k, Id(GgufValueType::kInt8), Encode(v)); }
GgufBuilder& GgufBuilder::AddUint16(const std::string& k, uint16_t v) { return AddRaw(k, Id(GgufValueType::kUint16), Encode(v)); }
GgufBuilder& GgufBuilder::AddInt16(const std::string& k, int16_t v) { return AddRaw(k, Id(GgufValueType::kInt16), Encode(v)); }
GgufBuilder& GgufBuilder::AddUint32(const std::string& k, uint32_t v) { return AddRaw(k, Id(GgufValueType::kUint32), Encode(v)); }
GgufBuilder& GgufBuilder::AddInt32(const std::string& k, int32_t v) { return AddRaw(k, Id(GgufValueType::kInt32), Encode(v)); }
GgufBuilder& GgufBuilder::AddUint64(const std::string& k, uint64_t v) { return AddRaw(k, Id(GgufValueType::kUint64), Encode(v)); }
GgufBuilder& GgufBuilder::AddInt64(const std::string& k, int64_t v) { return AddRaw(k, Id(GgufValueType::kInt64), Encode(v)); }
GgufBuilder& GgufBuilder::AddFloat32(const std::string& k, float v) { return AddRaw(k, Id(GgufValueType::kFloat32), Encode(v)); }
GgufBuilder& GgufBuilder::AddFloat64(const std::string& k, double v) { return AddRaw(k, Id(GgufValueType::kFloat64), Encode(v)); }
GgufBuilder& GgufBuilder::AddBool(const std::string& k, bool v) { return AddRaw(k, Id(GgufValueType::kBool), Encode<uint8_t>(v ? 1 : 0)); }

GgufBuilder& GgufBuilder::AddString(const std::string& k, const std::string& v) {
  std::vector<uint8_t> payload;
  AppendString(payload, v);
  return AddRaw(k, Id(GgufValueType::kString), std::move(payload));
}

GgufBuilder& GgufBuilder::AddStringArray(const std::string& k, const std::vector<std::string>& v) {
  std::vector<uint8_t> payload;
  AppendU32(payload, Id(GgufValueType::kString));
  AppendU64(payload, v.size());
  for (const std::string& s : v) AppendString(payload, s);
  return AddRaw(k, Id(GgufValueType::kArray), std::move(payload));
}

GgufBuilder& GgufBuilder::AddInt32Array(const std::string& k, const std::vector<int32_t>& v) {
  std::vector<uint8_t> payload;
  AppendU32(payload, Id(GgufValueType::kInt32));
  AppendU64(payload, v.size());
  for (int32_t x : v) AppendU32(payload, static_cast<uint32_t>(x));
  return AddRaw(k, Id(GgufValueType::kArray), std::move(payload));
}

GgufBuilder& GgufBuilder::AddSpmVocabulary(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                                           const std::vector<int32_t>& types) {
  AddString("tokenizer.ggml.model", "llama");
  AddStringArray("tokenizer.ggml.tokens", tokens);
  AddFloat32Array("tokenizer.ggml.scores", scores);
  AddInt32Array("tokenizer.ggml.token_type", types);
  AddUint32("tokenizer.ggml.unknown_token_id", 0);
  AddUint32("tokenizer.ggml.bos_token_id", 1);
  return AddUint32("tokenizer.ggml.eos_token_id", 2);
}

GgufBuilder& GgufBuilder::AddFloat32Array(const std::string& k, const std::vector<float>& v) {
  std::vector<uint8_t> payload;
  AppendU32(payload, Id(GgufValueType::kFloat32));
  AppendU64(payload, v.size());
  for (float x : v) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    AppendU32(payload, bits);
  }
  return AddRaw(k, Id(GgufValueType::kArray), std::move(payload));
}

GgufBuilder& GgufBuilder::SetAlignment(uint32_t alignment) {
  alignment_ = alignment;
  return AddUint32("general.alignment", alignment);
}

GgufBuilder& GgufBuilder::AddTensor(const std::string& name, std::vector<int64_t> dims,
                                    TensorType type, std::vector<uint8_t> data) {
  tensors_.push_back({name, std::move(dims), type, std::move(data)});
  return *this;
}

GgufBuilder& GgufBuilder::AddTensorF32(const std::string& name, std::vector<int64_t> dims,
                                       const std::vector<float>& values) {
  std::vector<uint8_t> data(values.size() * 4);
  if (!data.empty()) std::memcpy(data.data(), values.data(), data.size());
  return AddTensor(name, std::move(dims), TensorType::kF32, std::move(data));
}

std::vector<uint8_t> GgufBuilder::Build(Layout* layout) const {
  Layout local;
  Layout& l = layout != nullptr ? *layout : local;
  l = Layout{};
  std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
  AppendU32(out, version_);
  AppendU64(out, tensors_.size());
  AppendU64(out, kvs_.size());
  for (const KeyValue& kv : kvs_) {
    l.kv_begin.push_back(out.size());
    AppendString(out, kv.key);
    l.kv_type_field.push_back(out.size());
    AppendU32(out, kv.type_id);
    out.insert(out.end(), kv.payload.begin(), kv.payload.end());
  }
  const uint64_t align = alignment_ == 0 ? 1 : alignment_;
  uint64_t data_offset = 0;
  std::vector<uint64_t> offsets;
  for (const Tensor& t : tensors_) {
    TensorInfoLayout tl{};
    tl.begin = out.size();
    AppendString(out, t.name);
    tl.n_dims_field = out.size();
    AppendU32(out, static_cast<uint32_t>(t.dims.size()));
    tl.dims_field = out.size();
    for (int64_t d : t.dims) AppendU64(out, static_cast<uint64_t>(d));
    tl.type_field = out.size();
    AppendU32(out, static_cast<uint32_t>(t.type));
    tl.offset_field = out.size();
    AppendU64(out, data_offset);
    offsets.push_back(data_offset);
    data_offset += (t.data.size() + align - 1) / align * align;
    l.tensors.push_back(tl);
  }
  l.tensor_infos_end = out.size();
  if (!tensors_.empty()) {
    out.resize((out.size() + align - 1) / align * align, 0);
  }
  l.data_begin = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    l.tensors[i].data = l.data_begin + offsets[i];
    out.resize(l.data_begin + offsets[i], 0);
    out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
  }
  return out;
}

namespace {

// Test programs run in parallel (ctest -j) and map the files they write, so each process
// writes into its own directory: rewriting a file another process has mapped would SIGBUS
// it. The directory is removed when the process exits.
class ProcessTempDir {
 public:
  ProcessTempDir()
      : path_(::testing::TempDir() + "hetero-test-" + std::to_string(::getpid()) + "/") {
    std::filesystem::create_directories(path_);
  }
  ~ProcessTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

std::string WriteTempFile(const std::vector<uint8_t>& bytes, const std::string& name) {
  static const ProcessTempDir dir;
  const std::string path = dir.path() + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  EXPECT_TRUE(f.good()) << "cannot write " << path;
  return path;
}

}  // namespace hetero::testing
