// The OLMo family: OLMoE (olmoe), a mixture of experts whose queries and keys are each
// RMS-normed as a whole vector (not per head) before rotating NeoX-style; the routed
// weights are used as the router gives them (no renormalisation).
#include "absl/strings/str_cat.h"
#include "src/runtime/models/architectures.h"
#include "src/runtime/models/hyperparameters.h"

namespace hetero {
namespace {

absl::StatusOr<ModelDefinition> DefineOlmoe(const GgufFile& file, ModelConfig& c) {
  if (c.n_experts == 0) return ConfigError(file, "olmoe needs olmoe.expert_count > 0");
  c.rope_style = RopeStyle::kNeox;
  ModelDefinition d;
  d.family = "olmo";
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition l = StandardLayer(i, c);
    AddQkNorms(i, l);
    l.qk_norm_per_head = false;
    UseExperts(i, c, /*normalize_weights=*/false, l);
    d.layers.push_back(std::move(l));
  }
  AddFeature(c, "RMS norms on all of the queries and all of the keys");
  AddFeature(c, DescribeExperts(d.layers.front().experts));
  return d;
}

constexpr Architecture kOlmoFamily[] = {
    {"olmoe", DefineOlmoe},
};

}  // namespace

absl::Span<const Architecture> OlmoFamily() { return kOlmoFamily; }

}  // namespace hetero
