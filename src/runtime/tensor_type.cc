#include "src/runtime/tensor_type.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace hetero {
namespace {

constexpr uint32_t kQK = 32;    // elements per block of the legacy formats
constexpr uint32_t kQK_K = 256; // elements per super-block of the K- and I-quants

constexpr std::array kTraits = {
    TensorTypeTraits{TensorType::kF32, "F32", 1, 4, true},
    TensorTypeTraits{TensorType::kF16, "F16", 1, 2, true},
    TensorTypeTraits{TensorType::kQ4_0, "Q4_0", kQK, 2 + kQK / 2, true},
    TensorTypeTraits{TensorType::kQ4_1, "Q4_1", kQK, 2 + 2 + kQK / 2, true},
    TensorTypeTraits{TensorType::kQ5_0, "Q5_0", kQK, 2 + 4 + kQK / 2, true},
    TensorTypeTraits{TensorType::kQ5_1, "Q5_1", kQK, 2 + 2 + 4 + kQK / 2, true},
    TensorTypeTraits{TensorType::kQ8_0, "Q8_0", kQK, 2 + kQK, true},
    TensorTypeTraits{TensorType::kQ8_1, "Q8_1", kQK, 4 + 4 + kQK, false},
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
    TensorTypeTraits{TensorType::kIQ4_NL, "IQ4_NL", kQK, 2 + kQK / 2, false},
    TensorTypeTraits{TensorType::kIQ3_S, "IQ3_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4, false},
    TensorTypeTraits{TensorType::kIQ2_S, "IQ2_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 16, false},
    TensorTypeTraits{TensorType::kIQ4_XS, "IQ4_XS", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64, false},
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

}  // namespace

const TensorTypeTraits* FindTensorTypeTraits(uint32_t type_id) {
  for (const TensorTypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type_id) return &t;
  }
  return nullptr;
}

const TensorTypeTraits& GetTensorTypeTraits(TensorType type) {
  const TensorTypeTraits* traits = FindTensorTypeTraits(static_cast<uint32_t>(type));
  // Every enumerator has a row above; the table test checks it.
  return *traits;
}

std::string DequantizableTypeList() {
  std::string out;
  for (const TensorTypeTraits& t : kTraits) {
    if (!t.dequantizable) continue;
    if (!out.empty()) out += ", ";
    absl::StrAppend(&out, t.name);
  }
  return out;
}

std::string TensorTypeName(TensorType type) {
  const TensorTypeTraits* traits = FindTensorTypeTraits(static_cast<uint32_t>(type));
  if (traits == nullptr) return absl::StrCat("unknown(", static_cast<uint32_t>(type), ")");
  return std::string(traits->name);
}

}  // namespace hetero
