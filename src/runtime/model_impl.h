// Library-internal view of a loaded Model: the parsed GGUF file that backends read
// weights from, and the definition they execute.
#ifndef HETERO_RUNTIME_MODEL_IMPL_H_
#define HETERO_RUNTIME_MODEL_IMPL_H_

#include <memory>
#include <string>
#include <vector>

#include "hetero/model.h"
#include "src/runtime/gguf.h"
#include "src/runtime/models/model_definition.h"

namespace hetero {

struct Model::Impl {
  std::unique_ptr<GgufFile> gguf;
  ModelConfig config;
  ModelDefinition definition;  // what the backends compute (src/runtime/models/)
  std::vector<TensorSummary> tensors;
  std::vector<std::string> unused_tensors;
  uint64_t parameter_count = 0;
  uint64_t decode_weight_bytes = 0;  // Model::decode_weight_bytes
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_MODEL_IMPL_H_
