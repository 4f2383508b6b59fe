#include "src/runtime/model_config.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/models/hyperparameters.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/tensor_type.h"

namespace hetero {

absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file) {
  HETERO_ASSIGN_OR_RETURN(ModelArchitecture model, ReadModelArchitecture(file));
  return std::move(model.config);
}

absl::StatusOr<std::vector<std::string>> ValidateModelTensors(const GgufFile& file, const ModelArchitecture& model) {
  const ModelConfig& config = model.config;
  auto shape_string = [](const std::vector<int64_t>& dims) {
    return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
  };
  absl::flat_hash_set<absl::string_view> used;
  const std::vector<ExpectedTensor> expected = ExpectedTensors(config, model.definition);
  for (const ExpectedTensor& e : expected) {
    const GgufTensorInfo* t = file.FindTensor(e.name);
    if (t == nullptr) {
      if (!e.required) continue;
      return ConfigError(file, absl::StrCat("tensor '", e.name, "' is missing (", config.architecture,
                                            " with ", config.n_layers, " layers needs it)"));
    }
    used.insert(t->name);
    std::vector<int64_t> dims = t->dims;
    if (e.may_be_one_row && dims.size() == 2 && dims[1] == 1) dims.pop_back();
    if (dims != e.shape) {
      return ConfigError(file, absl::StrCat("tensor '", e.name, "' has shape ", shape_string(t->dims),
                                            ", expected ", shape_string(e.shape)));
    }
    if (!GetTensorTypeTraits(t->type).dequantizable) {
      return absl::UnimplementedError(absl::StrCat(
          "model '", file.source_name(), "': tensor '", e.name, "' has weight type ",
          TensorTypeName(t->type),
          ", which hetero does not support (supported: ", DequantizableTypeList(), ")"));
    }
  }
  std::vector<std::string> unused;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (!used.contains(t.name)) unused.emplace_back(t.name);
  }
  return unused;
}

}  // namespace hetero
