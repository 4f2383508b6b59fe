// ModelConfig and the model definition from GGUF metadata (src/runtime/models/), and the
// check that a file holds every tensor its definition reads with the right shape and a
// supported type.
#ifndef HETERO_RUNTIME_MODEL_CONFIG_H_
#define HETERO_RUNTIME_MODEL_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/model.h"
#include "src/runtime/gguf.h"
#include "src/runtime/models/architectures.h"
#include "src/runtime/models/model_definition.h"

namespace hetero {

// The hyperparameters of any supported architecture (ReadModelArchitecture's config).
absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file);

// Checks that each tensor the definition reads exists with its shape and a type hetero can
// compute with. Returns the names of tensors in the file that the model does not use.
absl::StatusOr<std::vector<std::string>> ValidateModelTensors(const GgufFile& file, const ModelArchitecture& model);

}  // namespace hetero

#endif  // HETERO_RUNTIME_MODEL_CONFIG_H_
