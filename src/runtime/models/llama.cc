// The llama family: Llama 1-3.x (Llama 3.1's RoPE frequency scaling comes as
// rope_freqs.weight), Mistral (a sliding window where the file sets one), Mixtral (llama
// layers with experts), SmolLM, and Granite 3, dense and MoE (llama layers with embedding,
// attention, residual and logit multipliers).
#include "absl/strings/str_cat.h"
#include "src/runtime/models/architectures.h"
#include "src/runtime/models/hyperparameters.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

// <arch>.attention.sliding_window, 0 when absent or 0 (converters write 0 for "none").
absl::StatusOr<int> SlidingWindow(const GgufFile& file, const ModelConfig& c) {
  const std::string key = c.architecture + ".attention.sliding_window";
  const GgufValue* value = file.FindValue(key);
  if (value == nullptr) return 0;
  HETERO_ASSIGN_OR_RETURN(uint64_t window, file.GetUint64(key));
  if (window == 0) return 0;
  return GetDimension(file, key);
}

absl::StatusOr<ModelDefinition> DefineLlama(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNormal;
  c.attention_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  HETERO_ASSIGN_OR_RETURN(const int window, SlidingWindow(file, c));
  ModelDefinition d;
  d.family = "llama";
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition l = StandardLayer(i, c);
    if (c.attention_bias) AddAttentionBiases(i, l);
    l.sliding_window = window;
    // Mixtral and Granite MoE renormalise the chosen experts' weights (top-k, then softmax).
    if (c.n_experts > 0) UseExperts(i, c, /*normalize_weights=*/true, l);
    d.layers.push_back(std::move(l));
  }
  if (c.n_experts > 0) AddFeature(c, DescribeExperts(d.layers.front().experts));
  if (window > 0) AddFeature(c, absl::StrCat("sliding-window attention (", window, " positions) on every layer"));
  return d;
}

// Granite: embeddings times embedding_scale, q·k times attention.scale (in place of
// 1/sqrt(head_dim)), each block's output times residual_scale, logits divided by
// logit_scale.
absl::StatusOr<ModelDefinition> DefineGranite(const GgufFile& file, ModelConfig& c) {
  HETERO_ASSIGN_OR_RETURN(ModelDefinition d, DefineLlama(file, c));
  const std::string p = c.architecture + ".";
  HETERO_ASSIGN_OR_RETURN(d.embedding_scale, GetPositiveFloatOr(file, p + "embedding_scale", 1.0f));
  HETERO_ASSIGN_OR_RETURN(d.attention_scale, GetPositiveFloatOr(file, p + "attention.scale", d.attention_scale));
  HETERO_ASSIGN_OR_RETURN(d.residual_scale, GetPositiveFloatOr(file, p + "residual_scale", 1.0f));
  HETERO_ASSIGN_OR_RETURN(const float logit_divisor, GetPositiveFloatOr(file, p + "logit_scale", 1.0f));
  d.logit_scale = 1.0f / logit_divisor;
  AddFeature(c, absl::StrCat("multipliers: embeddings ", d.embedding_scale, ", residual ", d.residual_scale,
                             ", logits 1/", logit_divisor,
                             d.attention_scale > 0 ? absl::StrCat(", attention ", d.attention_scale) : ""));
  return d;
}

absl::StatusOr<ModelDefinition> DefineGraniteMoe(const GgufFile& file, ModelConfig& c) {
  if (c.n_experts == 0) return ConfigError(file, "granitemoe needs granitemoe.expert_count > 0");
  return DefineGranite(file, c);
}

constexpr Architecture kLlamaFamily[] = {
    {"llama", DefineLlama},
    {"granite", DefineGranite},
    {"granitemoe", DefineGraniteMoe},
};

}  // namespace

absl::Span<const Architecture> LlamaFamily() { return kLlamaFamily; }

}  // namespace hetero
