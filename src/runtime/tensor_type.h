// The tensor element types a GGUF file can name (ggml's type ids), with their block
// geometry. The ids are part of the file format and never change.
#ifndef HETERO_RUNTIME_TENSOR_TYPE_H_
#define HETERO_RUNTIME_TENSOR_TYPE_H_

#include <array>
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

namespace tensor_type_internal {
inline constexpr uint32_t kQK = 32;    // elements per block of the legacy formats
inline constexpr uint32_t kQK_K = 256; // elements per super-block of the K- and I-quants

inline constexpr std::array kTraits = {
    TensorTypeTraits{TensorType::kF32, "F32", 1, 4, true},
    TensorTypeTraits{TensorType::kF16, "F16", 1, 2, true},
    TensorTypeTraits{TensorType::kQ4_0, "Q4_0", kQK, 2 + kQK / 2, true},
    TensorTypeTraits{TensorType::kQ4_1, "Q4_1", kQK, 2 + 2 + kQK / 2, true},
    TensorTypeTraits{TensorType::kQ5_0, "Q5_0", kQK, 2 + 4 + kQK / 2, true},
    TensorTypeTraits{TensorType::kQ5_1, "Q5_1", kQK, 2 + 2 + 4 + kQK / 2, true},
    TensorTypeTraits{TensorType::kQ8_0, "Q8_0", kQK, 2 + kQK, true},
    // ggml's block_q8_1 is { half d; half s; int8 qs[32] } (gguf-py 0.19 still lists 40).
    TensorTypeTraits{TensorType::kQ8_1, "Q8_1", kQK, 2 + 2 + kQK, false},
    TensorTypeTraits{TensorType::kQ2_K, "Q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4, true},
    TensorTypeTraits{TensorType::kQ3_K, "Q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12, true},
    TensorTypeTraits{TensorType::kQ4_K, "Q4_K", kQK_K, 2 + 2 + 12 + kQK_K / 2, true},
    TensorTypeTraits{TensorType::kQ5_K, "Q5_K", kQK_K, 2 + 2 + 12 + kQK_K / 8 + kQK_K / 2, true},
    TensorTypeTraits{TensorType::kQ6_K, "Q6_K", kQK_K, 2 + kQK_K / 2 + kQK_K / 4 + kQK_K / 16, true},
    TensorTypeTraits{TensorType::kQ8_K, "Q8_K", kQK_K, 4 + kQK_K + kQK_K / 8, true},
    TensorTypeTraits{TensorType::kIQ2_XXS, "IQ2_XXS", kQK_K, 2 + kQK_K / 4, false},
    TensorTypeTraits{TensorType::kIQ2_XS, "IQ2_XS", kQK_K, 2 + kQK_K / 4 + kQK_K / 32, false},
    TensorTypeTraits{TensorType::kIQ3_XXS, "IQ3_XXS", kQK_K, 2 + kQK_K / 4 + kQK_K / 8, false},
    TensorTypeTraits{TensorType::kIQ1_S, "IQ1_S", kQK_K, 2 + kQK_K / 8 + kQK_K / 16, false},
    TensorTypeTraits{TensorType::kIQ4_NL, "IQ4_NL", kQK, 2 + kQK / 2, true},
    TensorTypeTraits{TensorType::kIQ3_S, "IQ3_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4, false},
    TensorTypeTraits{TensorType::kIQ2_S, "IQ2_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 16, false},
    TensorTypeTraits{TensorType::kIQ4_XS, "IQ4_XS", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64, true},
    TensorTypeTraits{TensorType::kI8, "I8", 1, 1, false},
    TensorTypeTraits{TensorType::kI16, "I16", 1, 2, false},
    TensorTypeTraits{TensorType::kI32, "I32", 1, 4, false},
    TensorTypeTraits{TensorType::kI64, "I64", 1, 8, false},
    TensorTypeTraits{TensorType::kF64, "F64", 1, 8, false},
    TensorTypeTraits{TensorType::kIQ1_M, "IQ1_M", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32, false},
    TensorTypeTraits{TensorType::kBF16, "BF16", 1, 2, true},
    TensorTypeTraits{TensorType::kTQ1_0, "TQ1_0", kQK_K, 2 + 4 * 13, false},
    TensorTypeTraits{TensorType::kTQ2_0, "TQ2_0", kQK_K, 2 + 64, false},
    TensorTypeTraits{TensorType::kMXFP4, "MXFP4", kQK, 1 + kQK / 2, false},
};

}  // namespace tensor_type_internal

// Traits of a raw type id read from a file, or nullptr when the id names no known type.
constexpr const TensorTypeTraits* FindTensorTypeTraits(uint32_t type_id) {
  for (const TensorTypeTraits& t : tensor_type_internal::kTraits) {
    if (static_cast<uint32_t>(t.type) == type_id) return &t;
  }
  return nullptr;
}

// Traits of a known type (every enumerator has a row in the table).
constexpr const TensorTypeTraits& GetTensorTypeTraits(TensorType type) {
  return *FindTensorTypeTraits(static_cast<uint32_t>(type));
}

// "F32, F16, ..., Q8_K": the types hetero can dequantize, for error messages.
std::string DequantizableTypeList();

// "Q4_1", or "unknown(N)" for an id outside the enum.
std::string TensorTypeName(TensorType type);

}  // namespace hetero

#endif  // HETERO_RUNTIME_TENSOR_TYPE_H_
