#include "src/runtime/tensor_type.h"

#include "absl/strings/str_cat.h"

namespace hetero {

std::string DequantizableTypeList() {
  std::string out;
  for (const TensorTypeTraits& t : tensor_type_internal::kTraits) {
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
