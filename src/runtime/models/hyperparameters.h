// Reading hyperparameters from GGUF metadata, checked: the keys every architecture shares,
// and the typed getters the definition files use for their own keys. Errors name the
// model and the key.
#ifndef HETERO_RUNTIME_MODELS_HYPERPARAMETERS_H_
#define HETERO_RUNTIME_MODELS_HYPERPARAMETERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hetero/model.h"
#include "src/runtime/gguf.h"

namespace hetero {

// InvalidArgument "model '<file>': <what>".
absl::Status ConfigError(const GgufFile& file, absl::string_view what);
// Unimplemented "model '<file>': <what>".
absl::Status ConfigUnimplemented(const GgufFile& file, absl::string_view what);

// A required integer in 1..2^24.
absl::StatusOr<int> GetDimension(const GgufFile& file, const std::string& key);
// The same, or `fallback` when the key is absent.
absl::StatusOr<int> GetDimensionOr(const GgufFile& file, const std::string& key, int fallback);
// A per-layer value that converters may write as an array; hetero needs it uniform.
absl::StatusOr<int> GetUniformDimension(const GgufFile& file, const std::string& key);
// A positive finite float (checked after narrowing), or `fallback` when absent.
absl::StatusOr<float> GetPositiveFloatOr(const GgufFile& file, const std::string& key, float fallback);

// The keys every architecture has, read under "<config.architecture>.": layers, sizes,
// heads, context, RoPE (base, dimensions, none/linear scaling), RMS epsilon, vocabulary,
// tied output, rope_freqs.weight. Leaves rope_style and attention_bias to the definition.
absl::Status ReadCommonHyperparameters(const GgufFile& file, ModelConfig& config);

}  // namespace hetero

#endif  // HETERO_RUNTIME_MODELS_HYPERPARAMETERS_H_
