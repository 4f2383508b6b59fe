#include "src/runtime/gguf.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr int kMaxArrayNesting = 16;
constexpr uint32_t kMaxTensorDims = 4;
constexpr uint64_t kMaxNestedArrays = uint64_t{1} << 16;

// Smallest encodings, used to bound counts by the bytes left before reserving memory.
constexpr uint64_t kMinKeyValueBytes = 8 + 1 + 4 + 1;          // key length, key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;    // name length, name, n_dims, type, offset

// Size in bytes of a primitive value type, 0 for string and array.
uint64_t PrimitiveSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownValueType(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufValueType::kFloat64); }

uint64_t MinEncodedSize(GgufValueType type) {
  if (type == GgufValueType::kString) return 8;
  if (type == GgufValueType::kArray) return 4 + 8;
  return PrimitiveSize(type);
}

}  // namespace

std::string PrintableName(absl::string_view s) {
  constexpr size_t max_len = 128;
  std::string out;
  for (char c : s.substr(0, max_len)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    }
  }
  if (s.size() > max_len) absl::StrAppend(&out, "... (", s.size(), " bytes)");
  return out;
}

namespace {
constexpr auto Printable = PrintableName;

// Position of the first byte that breaks UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing past U+10FFFF), or npos.
size_t FirstInvalidUtf8(absl::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + extra >= n) return i;  // the sequence is cut off by the end of the string
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k <= extra; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += extra + 1;
  }
  return absl::string_view::npos;
}
}  // namespace

absl::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "invalid";
}

// ---- GgufValue ----------------------------------------------------------------------------

bool GgufValue::is_integer() const {
  switch (type_) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

namespace {
bool IsSignedInteger(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}
absl::Status TypeMismatch(GgufValueType got, absl::string_view wanted) {
  return absl::InvalidArgumentError(
      absl::StrCat("has type ", GgufValueTypeName(got), ", expected ", wanted));
}
}  // namespace

absl::StatusOr<uint64_t> GgufValue::ToUint64() const {
  if (!is_integer()) return TypeMismatch(type_, "an integer");
  if (IsSignedInteger(type_) && static_cast<int64_t>(bits_) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("is negative (", static_cast<int64_t>(bits_), "), expected >= 0"));
  }
  return bits_;
}

absl::StatusOr<int64_t> GgufValue::ToInt64() const {
  if (!is_integer()) return TypeMismatch(type_, "an integer");
  if (!IsSignedInteger(type_) && bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("value ", bits_, " does not fit in int64"));
  }
  return static_cast<int64_t>(bits_);
}

absl::StatusOr<double> GgufValue::ToDouble() const {
  if (is_float()) {
    double d;
    std::memcpy(&d, &bits_, sizeof d);
    return d;
  }
  if (is_integer()) {
    return IsSignedInteger(type_) ? static_cast<double>(static_cast<int64_t>(bits_))
                                  : static_cast<double>(bits_);
  }
  return TypeMismatch(type_, "a number");
}

absl::StatusOr<bool> GgufValue::ToBool() const {
  if (type_ != GgufValueType::kBool) return TypeMismatch(type_, "bool");
  return bits_ != 0;
}

absl::StatusOr<absl::string_view> GgufValue::ToString() const {
  if (type_ != GgufValueType::kString) return TypeMismatch(type_, "string");
  return string_;
}

absl::StatusOr<const GgufArray*> GgufValue::ToArray() const {
  if (type_ != GgufValueType::kArray) return TypeMismatch(type_, "array");
  return array_.get();
}

// ---- Parser -------------------------------------------------------------------------------

class GgufParser {
 public:
  GgufParser(GgufFile& file) : file_(file), bytes_(file.bytes_) {}

  absl::Status Run() {
    HETERO_RETURN_IF_ERROR(ParseHeader());
    HETERO_RETURN_IF_ERROR(ParseMetadata());
    HETERO_RETURN_IF_ERROR(ReadAlignment());
    HETERO_RETURN_IF_ERROR(ParseTensorInfos());
    return PlaceTensorData();
  }

 private:
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename... Args>
  absl::Status Error(uint64_t offset, const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat("GGUF '", file_.source_name_, "': ", args...,
                                                   " (at byte offset ", offset, ")"));
  }

  absl::Status Need(uint64_t n, absl::string_view what) const {
    if (n > remaining()) {
      return Error(pos_, "file truncated: reading ", what, " needs ", n, " bytes but only ",
                   remaining(), " remain");
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    HETERO_RETURN_IF_ERROR(Need(sizeof(T), what));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  // Keys, names and string values must be UTF-8 (the GGUF specification says so, and they
  // reach logs, JSON and chat templates). Vocabulary arrays are read as bytes: tokenizers
  // decode them themselves and some published vocabularies hold partial sequences.
  absl::StatusOr<absl::string_view> ReadString(absl::string_view what, bool validate_utf8 = true) {
    const uint64_t start = pos_;
    HETERO_ASSIGN_OR_RETURN(uint64_t length, Read<uint64_t>(absl::StrCat(what, " length")));
    if (length > remaining()) {
      return Error(start, what, " claims ", length, " bytes but only ", remaining(),
                   " remain in the file");
    }
    absl::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    const uint64_t text_at = pos_;
    pos_ += length;
    if (validate_utf8) {
      const size_t bad = FirstInvalidUtf8(s);
      if (bad != absl::string_view::npos) {
        return Error(text_at + bad, what, " is not valid UTF-8: byte 0x",
                     absl::Hex(static_cast<uint8_t>(s[bad]), absl::kZeroPad2), " at position ", bad,
                     " of the string ('", PrintableName(s.substr(0, 64)), "')");
      }
    }
    return s;
  }

  absl::Status ParseHeader() {
    if (bytes_.empty()) {
      return Error(0, "file is empty; a GGUF file starts with the magic \"GGUF\"");
    }
    if (bytes_.size() < 4) {
      return Error(0, "file truncated: ", bytes_.size(), " bytes is too short for the magic");
    }
    uint32_t magic;
    std::memcpy(&magic, bytes_.data(), 4);
    if (magic != kGgufMagic) {
      absl::string_view found(reinterpret_cast<const char*>(bytes_.data()), 4);
      std::string hint;
      if (found == "lmgg" || found == "fjgg" || found == "tjgg" || found == "algg") {
        hint = "; this is a legacy GGML/GGJT file: convert it to GGUF";
      }
      return Error(0, "bad magic \"", Printable(found), "\", expected \"GGUF\"", hint);
    }
    pos_ = 4;
    HETERO_ASSIGN_OR_RETURN(uint32_t version, Read<uint32_t>("version"));
    if (version == 1) {
      return Error(4, "GGUF version 1 is not supported (32-bit counts); re-convert the model "
                      "with a current converter");
    }
    if (version != 2 && version != 3) {
      if ((version & 0xFFFF) == 0 && (version >> 24) >= 1 && (version >> 24) <= 3) {
        return Error(4, "version field reads ", version,
                     ", a byte-swapped (big-endian) GGUF file; only little-endian files are "
                     "supported");
      }
      return Error(4, "unsupported GGUF version ", version, " (supported: 2 and 3)");
    }
    file_.version_ = version;
    HETERO_ASSIGN_OR_RETURN(n_tensors_, Read<uint64_t>("tensor count"));
    HETERO_ASSIGN_OR_RETURN(n_kv_, Read<uint64_t>("metadata count"));
    // Bound both counts by the bytes left, so a tiny file that claims 2^60 entries fails
    // here, before any allocation.
    if (n_kv_ > remaining() / kMinKeyValueBytes) {
      return Error(16, "metadata count ", n_kv_, " cannot fit in the ", remaining(),
                   " bytes that remain");
    }
    if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
      return Error(8, "tensor count ", n_tensors_, " cannot fit in the ", remaining(),
                   " bytes that remain");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<GgufValueType> ReadValueType(absl::string_view what) {
    const uint64_t at = pos_;
    HETERO_ASSIGN_OR_RETURN(uint32_t raw, Read<uint32_t>(what));
    if (!IsKnownValueType(raw)) return Error(at, "unknown ", what, " ", raw);
    return static_cast<GgufValueType>(raw);
  }

  absl::StatusOr<GgufValue> ParseValue(GgufValueType type, int depth, absl::string_view key) {
    GgufValue value;
    value.type_ = type;
    const uint64_t at = pos_;
    switch (type) {
      case GgufValueType::kUint8: {
        HETERO_ASSIGN_OR_RETURN(uint8_t v, Read<uint8_t>("uint8 value"));
        value.bits_ = v;
        break;
      }
      case GgufValueType::kInt8: {
        HETERO_ASSIGN_OR_RETURN(int8_t v, Read<int8_t>("int8 value"));
        value.bits_ = static_cast<uint64_t>(static_cast<int64_t>(v));
        break;
      }
      case GgufValueType::kUint16: {
        HETERO_ASSIGN_OR_RETURN(uint16_t v, Read<uint16_t>("uint16 value"));
        value.bits_ = v;
        break;
      }
      case GgufValueType::kInt16: {
        HETERO_ASSIGN_OR_RETURN(int16_t v, Read<int16_t>("int16 value"));
        value.bits_ = static_cast<uint64_t>(static_cast<int64_t>(v));
        break;
      }
      case GgufValueType::kUint32: {
        HETERO_ASSIGN_OR_RETURN(uint32_t v, Read<uint32_t>("uint32 value"));
        value.bits_ = v;
        break;
      }
      case GgufValueType::kInt32: {
        HETERO_ASSIGN_OR_RETURN(int32_t v, Read<int32_t>("int32 value"));
        value.bits_ = static_cast<uint64_t>(static_cast<int64_t>(v));
        break;
      }
      case GgufValueType::kUint64: {
        HETERO_ASSIGN_OR_RETURN(value.bits_, Read<uint64_t>("uint64 value"));
        break;
      }
      case GgufValueType::kInt64: {
        HETERO_ASSIGN_OR_RETURN(int64_t v, Read<int64_t>("int64 value"));
        value.bits_ = static_cast<uint64_t>(v);
        break;
      }
      case GgufValueType::kFloat32: {
        HETERO_ASSIGN_OR_RETURN(float f, Read<float>("float32 value"));
        double d = f;
        std::memcpy(&value.bits_, &d, sizeof d);
        break;
      }
      case GgufValueType::kFloat64: {
        HETERO_ASSIGN_OR_RETURN(double d, Read<double>("float64 value"));
        std::memcpy(&value.bits_, &d, sizeof d);
        break;
      }
      case GgufValueType::kBool: {
        HETERO_ASSIGN_OR_RETURN(uint8_t v, Read<uint8_t>("bool value"));
        if (v > 1) return Error(at, "bool value of '", key, "' is ", int{v}, ", expected 0 or 1");
        value.bits_ = v;
        break;
      }
      case GgufValueType::kString: {
        HETERO_ASSIGN_OR_RETURN(value.string_, ReadString("string value"));
        break;
      }
      case GgufValueType::kArray: {
        HETERO_ASSIGN_OR_RETURN(value.array_, ParseArray(depth + 1, key));
        break;
      }
    }
    return value;
  }

  absl::StatusOr<std::shared_ptr<const GgufArray>> ParseArray(int depth, absl::string_view key) {
    const uint64_t at = pos_;
    if (depth > kMaxArrayNesting) {
      return Error(at, "arrays in '", key, "' nest deeper than ", kMaxArrayNesting, " levels");
    }
    auto array = std::make_shared<GgufArray>();
    HETERO_ASSIGN_OR_RETURN(array->element_type, ReadValueType("array element type"));
    HETERO_ASSIGN_OR_RETURN(array->size, Read<uint64_t>("array length"));
    const uint64_t min_size = MinEncodedSize(array->element_type);
    if (array->size > remaining() / min_size) {
      return Error(at, "array '", key, "' claims ", array->size, " elements of type ",
                   GgufValueTypeName(array->element_type), ", more than the ", remaining(),
                   " bytes left can hold");
    }
    switch (array->element_type) {
      case GgufValueType::kString:
        array->strings.reserve(array->size);
        for (uint64_t i = 0; i < array->size; ++i) {
          HETERO_ASSIGN_OR_RETURN(absl::string_view s, ReadString("array string", /*validate_utf8=*/false));
          array->strings.push_back(s);
        }
        break;
      case GgufValueType::kArray:
        // Each nested array costs ~150 bytes of memory but only 12 bytes of file: cap
        // their number so memory stays proportional to real use, not to file size.
        nested_arrays_ += array->size;
        if (nested_arrays_ > kMaxNestedArrays) {
          return Error(at, "array '", key, "' brings the file's nested arrays past ",
                       kMaxNestedArrays);
        }
        array->arrays.reserve(array->size);
        for (uint64_t i = 0; i < array->size; ++i) {
          HETERO_ASSIGN_OR_RETURN(GgufValue v, ParseValue(GgufValueType::kArray, depth, key));
          array->arrays.push_back(std::move(v));
        }
        break;
      case GgufValueType::kBool: {
        const uint64_t n = array->size;
        array->raw = bytes_.subspan(pos_, n);
        for (uint64_t i = 0; i < n; ++i) {
          if (array->raw[i] > 1) {
            return Error(pos_ + i, "bool element ", i, " of '", key, "' is ", int{array->raw[i]},
                         ", expected 0 or 1");
          }
        }
        pos_ += n;
        break;
      }
      default: {
        const uint64_t n = array->size * min_size;  // cannot overflow: bounded by remaining()
        array->raw = bytes_.subspan(pos_, n);
        pos_ += n;
        break;
      }
    }
    return std::shared_ptr<const GgufArray>(std::move(array));
  }

  absl::Status ParseMetadata() {
    file_.metadata_.reserve(n_kv_);
    file_.metadata_index_.reserve(n_kv_);
    for (uint64_t i = 0; i < n_kv_; ++i) {
      const uint64_t at = pos_;
      HETERO_ASSIGN_OR_RETURN(absl::string_view key, ReadString("metadata key"));
      if (key.empty()) return Error(at, "metadata key ", i, " is empty");
      HETERO_ASSIGN_OR_RETURN(GgufValueType type, ReadValueType("metadata value type"));
      HETERO_ASSIGN_OR_RETURN(GgufValue value, ParseValue(type, 0, Printable(key)));
      if (!file_.metadata_index_.emplace(key, file_.metadata_.size()).second) {
        return Error(at, "duplicate metadata key '", Printable(key), "'");
      }
      file_.metadata_.push_back({key, std::move(value)});
    }
    return absl::OkStatus();
  }

  absl::Status ReadAlignment() {
    const GgufValue* value = file_.FindValue("general.alignment");
    if (value == nullptr) {
      file_.alignment_ = kDefaultAlignment;
      return absl::OkStatus();
    }
    absl::StatusOr<uint64_t> alignment = value->ToUint64();
    if (!alignment.ok()) {
      return Error(pos_, "general.alignment ", alignment.status().message());
    }
    if (*alignment == 0 || (*alignment & (*alignment - 1)) != 0 || *alignment > kMaxAlignment) {
      return Error(pos_, "general.alignment is ", *alignment,
                   ", expected a power of two between 1 and 2^30");
    }
    file_.alignment_ = *alignment;
    return absl::OkStatus();
  }

  absl::Status ParseTensorInfos() {
    if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
      return Error(pos_, "tensor count ", n_tensors_, " cannot fit in the ", remaining(),
                   " bytes after the metadata");
    }
    file_.tensors_.reserve(n_tensors_);
    file_.tensor_index_.reserve(n_tensors_);
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      const uint64_t at = pos_;
      GgufTensorInfo info;
      HETERO_ASSIGN_OR_RETURN(info.name, ReadString("tensor name"));
      if (info.name.empty()) return Error(at, "tensor ", i, " has an empty name");
      const std::string name = Printable(info.name);
      const uint64_t dims_at = pos_;
      HETERO_ASSIGN_OR_RETURN(uint32_t n_dims, Read<uint32_t>("tensor dimension count"));
      if (n_dims > kMaxTensorDims) {
        return Error(dims_at, "tensor '", name, "' has ", n_dims, " dimensions, at most ",
                     kMaxTensorDims, " are supported");
      }
      uint64_t n_elements = 1;
      uint64_t nonzero_product = 1;  // keeps the bound when a zero dimension hides others
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t dim_at = pos_;
        HETERO_ASSIGN_OR_RETURN(uint64_t dim, Read<uint64_t>("tensor dimension"));
        if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Error(dim_at, "tensor '", name, "' dimension ", d, " is ", dim,
                       ", beyond the int64 range");
        }
        if (__builtin_mul_overflow(n_elements, dim, &n_elements) ||
            __builtin_mul_overflow(nonzero_product, dim == 0 ? 1 : dim, &nonzero_product) ||
            nonzero_product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Error(dim_at, "tensor '", name, "' element count overflows at dimension ", d);
        }
        info.dims.push_back(static_cast<int64_t>(dim));
      }
      if (info.dims.empty()) info.dims.push_back(1);
      info.n_elements = n_elements;

      const uint64_t type_at = pos_;
      HETERO_ASSIGN_OR_RETURN(uint32_t type_id, Read<uint32_t>("tensor type"));
      const TensorTypeTraits* traits = FindTensorTypeTraits(type_id);
      if (traits == nullptr) {
        return Error(type_at, "tensor '", name, "' has unknown type id ", type_id);
      }
      info.type = traits->type;
      if (info.dims[0] % traits->block_size != 0) {
        return Error(type_at, "tensor '", name, "' of type ", traits->name, " has a row of ",
                     info.dims[0], " elements, not a multiple of the block size ",
                     traits->block_size);
      }
      // n_bytes = rows * blocks per row * bytes per block; elements fit in int64, and
      // type_size / block_size <= 8, so only the product with the block bytes can overflow.
      const uint64_t blocks = n_elements / traits->block_size;
      if (__builtin_mul_overflow(blocks, uint64_t{traits->type_size}, &info.n_bytes)) {
        return Error(type_at, "tensor '", name, "' byte size overflows");
      }

      const uint64_t offset_at = pos_;
      HETERO_ASSIGN_OR_RETURN(info.offset, Read<uint64_t>("tensor data offset"));
      if (info.offset % file_.alignment_ != 0) {
        return Error(offset_at, "tensor '", name, "' data offset ", info.offset,
                     " is not a multiple of the alignment ", file_.alignment_);
      }
      if (!file_.tensor_index_.emplace(info.name, file_.tensors_.size()).second) {
        return Error(at, "duplicate tensor name '", name, "'");
      }
      file_.tensors_.push_back(std::move(info));
    }
    return absl::OkStatus();
  }

  absl::Status PlaceTensorData() {
    const uint64_t alignment = file_.alignment_;
    // pos_ <= file size < 2^63, alignment <= 2^30: the sum cannot overflow.
    const uint64_t data_offset = (pos_ + alignment - 1) / alignment * alignment;
    file_.data_offset_ = data_offset;
    if (file_.tensors_.empty()) return absl::OkStatus();
    if (data_offset > bytes_.size()) {
      return Error(pos_, "file truncated: the tensor data section would start at byte ",
                   data_offset, ", past the end of the ", bytes_.size(), "-byte file");
    }
    const uint64_t data_size = bytes_.size() - data_offset;
    for (GgufTensorInfo& t : file_.tensors_) {
      if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
        return Error(data_offset + std::min(t.offset, data_size), "tensor '", Printable(t.name),
                     "' spans data bytes [", t.offset, ", ", t.offset, " + ", t.n_bytes,
                     ") beyond the ", data_size, "-byte data section (file truncated or corrupt)");
      }
      t.file_offset = data_offset + t.offset;
      t.data = bytes_.subspan(t.file_offset, t.n_bytes);
    }
    // Tensors must not overlap: sort the non-empty ones by offset and compare each with
    // the furthest end seen so far (not just its neighbour).
    std::vector<size_t> order;
    order.reserve(file_.tensors_.size());
    for (size_t i = 0; i < file_.tensors_.size(); ++i) {
      if (file_.tensors_[i].n_bytes > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return file_.tensors_[a].offset < file_.tensors_[b].offset;
    });
    uint64_t furthest_end = 0;
    size_t furthest = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const GgufTensorInfo& t = file_.tensors_[order[k]];
      if (k > 0 && t.offset < furthest_end) {
        return Error(t.file_offset, "tensor '", Printable(t.name), "' overlaps tensor '",
                     Printable(file_.tensors_[furthest].name), "'");
      }
      if (t.offset + t.n_bytes > furthest_end) {  // in range: checked above
        furthest_end = t.offset + t.n_bytes;
        furthest = order[k];
      }
    }
    return absl::OkStatus();
  }

  GgufFile& file_;
  absl::Span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t nested_arrays_ = 0;
};

// ---- GgufFile -----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, MappedFile::Open(path));
  auto file = std::unique_ptr<GgufFile>(new GgufFile());
  file->bytes_ = mapped->bytes();
  file->file_ = std::move(mapped);
  file->source_name_ = path;
  GgufParser parser(*file);
  HETERO_RETURN_IF_ERROR(parser.Run());
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(absl::Span<const uint8_t> bytes,
                                                          std::string source_name) {
  auto file = std::unique_ptr<GgufFile>(new GgufFile());
  file->bytes_ = bytes;
  file->source_name_ = std::move(source_name);
  GgufParser parser(*file);
  HETERO_RETURN_IF_ERROR(parser.Run());
  return file;
}

const GgufValue* GgufFile::FindValue(absl::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].value;
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

template <typename T>
absl::StatusOr<T> WithKey(const GgufFile& file, absl::string_view key, absl::StatusOr<T> result) {
  if (result.ok()) return result;
  return absl::Status(result.status().code(),
                      absl::StrCat("GGUF '", file.source_name(), "': metadata key '", key, "' ",
                                   result.status().message()));
}

absl::StatusOr<const GgufValue*> Lookup(const GgufFile& file, absl::string_view key) {
  const GgufValue* value = file.FindValue(key);
  if (value == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("GGUF '", file.source_name(), "': metadata key '", key, "' is missing"));
  }
  return value;
}

}  // namespace

absl::StatusOr<absl::string_view> GgufFile::GetString(absl::string_view key) const {
  HETERO_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  return WithKey(*this, key, v->ToString());
}

absl::StatusOr<uint64_t> GgufFile::GetUint64(absl::string_view key) const {
  HETERO_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  return WithKey(*this, key, v->ToUint64());
}

absl::StatusOr<uint32_t> GgufFile::GetUint32(absl::string_view key) const {
  HETERO_ASSIGN_OR_RETURN(uint64_t v, GetUint64(key));
  if (v > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF '", source_name_, "': metadata key '",
                                                   Printable(key), "' value ", v, " exceeds uint32"));
  }
  return static_cast<uint32_t>(v);
}

absl::StatusOr<double> GgufFile::GetDouble(absl::string_view key) const {
  HETERO_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  return WithKey(*this, key, v->ToDouble());
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  HETERO_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  return WithKey(*this, key, v->ToBool());
}

absl::StatusOr<const GgufArray*> GgufFile::GetArray(absl::string_view key) const {
  HETERO_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  return WithKey(*this, key, v->ToArray());
}

}  // namespace hetero
