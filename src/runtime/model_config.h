// ModelConfig from GGUF metadata, and the check that a file holds every tensor its
// architecture needs with the right shape and a supported type.
#ifndef HETERO_RUNTIME_MODEL_CONFIG_H_
#define HETERO_RUNTIME_MODEL_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/model.h"
#include "src/runtime/gguf.h"

namespace hetero {

// Reads the hyperparameters of a `llama` or `qwen2` model. Errors name the missing or
// malformed key; unsupported architectures and features are Unimplemented.
absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file);

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;  // ggml order
  bool required;
};

// Every tensor the architecture reads, in file-independent order.
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

// Checks that each expected tensor exists (when required) with its shape and a type hetero
// can compute with. Returns the names of tensors in the file that the model does not use.
absl::StatusOr<std::vector<std::string>> ValidateModelTensors(const GgufFile& file,
                                                              const ModelConfig& config);

}  // namespace hetero

#endif  // HETERO_RUNTIME_MODEL_CONFIG_H_
