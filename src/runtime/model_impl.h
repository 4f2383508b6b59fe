// Library-internal view of a loaded Model: the parsed GGUF file that backends read
// weights from.
#ifndef HETERO_RUNTIME_MODEL_IMPL_H_
#define HETERO_RUNTIME_MODEL_IMPL_H_

#include <memory>
#include <string>
#include <vector>

#include "hetero/model.h"
#include "src/runtime/gguf.h"

namespace hetero {

struct Model::Impl {
  std::unique_ptr<GgufFile> gguf;
  ModelConfig config;
  std::vector<TensorSummary> tensors;
  std::vector<std::string> unused_tensors;
  uint64_t parameter_count = 0;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_MODEL_IMPL_H_
