// The architectures hetero runs, each declared in its family's file (llama.cc, qwen.cc,
// gemma.cc, phi.cc, olmo.cc), and the one entry point that reads a GGUF file's configuration and
// model definition.
#ifndef HETERO_RUNTIME_MODELS_ARCHITECTURES_H_
#define HETERO_RUNTIME_MODELS_ARCHITECTURES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hetero/model.h"
#include "src/runtime/gguf.h"
#include "src/runtime/models/model_definition.h"

namespace hetero {

struct Architecture {
  const char* name;  // general.architecture
  // Called with the common hyperparameters already in `config` (models/hyperparameters.h):
  // reads the architecture's own keys into `config` and declares its layers.
  absl::StatusOr<ModelDefinition> (*define)(const GgufFile& file, ModelConfig& config);
};

// Each family file's list. A new architecture of a family is one entry in its file.
absl::Span<const Architecture> LlamaFamily();
absl::Span<const Architecture> QwenFamily();
absl::Span<const Architecture> GemmaFamily();
absl::Span<const Architecture> PhiFamily();
absl::Span<const Architecture> OlmoFamily();

// "llama, qwen2, ..." in family order.
std::string SupportedArchitectures();
// Those of them that read mixture-of-experts files.
std::string MoeArchitectures();

struct ModelArchitecture {
  ModelConfig config;
  ModelDefinition definition;
};

// The configuration and definition of the file's architecture. Errors name the missing or
// malformed key; unsupported architectures and features are Unimplemented.
absl::StatusOr<ModelArchitecture> ReadModelArchitecture(const GgufFile& file);

}  // namespace hetero

#endif  // HETERO_RUNTIME_MODELS_ARCHITECTURES_H_
