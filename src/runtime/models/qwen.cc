// The Qwen family: Qwen2/2.5 (q/k/v biases), Qwen3 (per-head q/k norms, no biases), and
// their mixtures of experts: Qwen1.5/2-MoE (qwen2moe: routed weights as the router gives
// them, plus a shared expert gated by a sigmoid) and Qwen3-MoE (weights renormalised over
// the chosen experts, no shared expert). All rotate NeoX-style.
#include "absl/strings/str_cat.h"
#include "src/runtime/models/architectures.h"
#include "src/runtime/models/hyperparameters.h"
#include "src/runtime/status_macros.h"

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

absl::Status NeedExperts(const GgufFile& file, const ModelConfig& c) {
  if (c.n_experts > 0) return absl::OkStatus();
  return ConfigError(file, absl::StrCat(c.architecture, " needs ", c.architecture, ".expert_count > 0"));
}

// <arch>.expert_weights_norm where the file has it, else the architecture's default.
absl::StatusOr<bool> NormalizeExpertWeights(const GgufFile& file, const ModelConfig& c, bool fallback) {
  const std::string key = c.architecture + ".expert_weights_norm";
  if (file.FindValue(key) == nullptr) return fallback;
  return file.GetBool(key);
}

absl::StatusOr<ModelDefinition> DefineQwen2Moe(const GgufFile& file, ModelConfig& c) {
  HETERO_RETURN_IF_ERROR(NeedExperts(file, c));
  HETERO_ASSIGN_OR_RETURN(ModelDefinition d, DefineQwen2(file, c));
  HETERO_ASSIGN_OR_RETURN(const bool normalize, NormalizeExpertWeights(file, c, false));
  HETERO_ASSIGN_OR_RETURN(const int shared_n_ff,
                          GetDimensionOr(file, c.architecture + ".expert_shared_feed_forward_length", c.n_ff));
  for (int i = 0; i < c.n_layers; ++i) {
    UseExperts(i, c, normalize, d.layers[i]);
    AddSharedExpert(i, shared_n_ff, d.layers[i]);
  }
  AddFeature(c, DescribeExperts(d.layers.front().experts));
  return d;
}

absl::StatusOr<ModelDefinition> DefineQwen3Moe(const GgufFile& file, ModelConfig& c) {
  HETERO_RETURN_IF_ERROR(NeedExperts(file, c));
  HETERO_ASSIGN_OR_RETURN(ModelDefinition d, DefineQwen3(file, c));
  HETERO_ASSIGN_OR_RETURN(const bool normalize, NormalizeExpertWeights(file, c, true));
  for (int i = 0; i < c.n_layers; ++i) UseExperts(i, c, normalize, d.layers[i]);
  AddFeature(c, DescribeExperts(d.layers.front().experts));
  return d;
}

constexpr Architecture kQwenFamily[] = {
    {"qwen2", DefineQwen2},
    {"qwen3", DefineQwen3},
    {"qwen2moe", DefineQwen2Moe},
    {"qwen3moe", DefineQwen3Moe},
};

}  // namespace

absl::Span<const Architecture> QwenFamily() { return kQwenFamily; }

}  // namespace hetero
