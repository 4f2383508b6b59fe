// The Qwen family: Qwen2/2.5 (q/k/v biases), Qwen3 (per-head q/k norms, no biases). Both
// rotate NeoX-style.
#include "absl/strings/str_cat.h"
#include "src/runtime/models/architectures.h"

namespace hetero {
namespace {

absl::StatusOr<ModelDefinition> DefineQwen2(const GgufFile& file, ModelConfig& c) {
  (void)file;
  c.rope_style = RopeStyle::kNeox;
  c.attention_bias = true;
  ModelDefinition d;
  d.family = "qwen";
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition l = StandardLayer(i, c);
    AddAttentionBiases(i, l);
    d.layers.push_back(std::move(l));
  }
  return d;
}

absl::StatusOr<ModelDefinition> DefineQwen3(const GgufFile& file, ModelConfig& c) {
  (void)file;
  c.rope_style = RopeStyle::kNeox;
  ModelDefinition d;
  d.family = "qwen";
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition l = StandardLayer(i, c);
    AddQkNorms(i, l);
    d.layers.push_back(std::move(l));
  }
  AddFeature(c, "per-head RMS norms on queries and keys");
  return d;
}

constexpr Architecture kQwenFamily[] = {
    {"qwen2", DefineQwen2},
    {"qwen3", DefineQwen3},
};

}  // namespace

absl::Span<const Architecture> QwenFamily() { return kQwenFamily; }

}  // namespace hetero
