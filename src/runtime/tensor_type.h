// The tensor element types a GGUF file can name (ggml's type ids), with their block
// geometry. The ids are part of the file format and never change.
#ifndef HETERO_RUNTIME_TENSOR_TYPE_H_
#define HETERO_RUNTIME_TENSOR_TYPE_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

namespace hetero {

enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  // 4 and 5 (Q4_2, Q4_3) were removed from the format.
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  // 31-33 and 36-38 were interleaved repacks, removed from the format.
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Elements per block and bytes per block: a row of n elements (n a multiple of
// block_size) occupies n / block_size * type_size bytes.
struct TensorTypeTraits {
  TensorType type;
  absl::string_view name;
  uint32_t block_size;
  uint32_t type_size;
  // Whether hetero can dequantize this type to float (see dequantize.h).
  bool dequantizable;
};

// Traits of a raw type id read from a file, or nullptr when the id names no known type.
const TensorTypeTraits* FindTensorTypeTraits(uint32_t type_id);

// Traits of a known type.
const TensorTypeTraits& GetTensorTypeTraits(TensorType type);

// "F32, F16, ..., Q8_K": the types hetero can dequantize, for error messages.
std::string DequantizableTypeList();

// "Q4_1", or "unknown(N)" for an id outside the enum.
std::string TensorTypeName(TensorType type);

}  // namespace hetero

#endif  // HETERO_RUNTIME_TENSOR_TYPE_H_
