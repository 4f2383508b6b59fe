// The Gemma family: Gemma 3 (text). Its layers alternate five sliding-window layers with
// one global layer; local layers rotate with a base of 10000, global ones with the file's
// base (and its linear scaling); queries and keys are RMS-normed per head; every block has
// a norm before and after it; the FFN is GeGLU with tanh GELU; embeddings are scaled by
// sqrt(n_embd). The converter already adds Gemma's "1 +" to the norm weights.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/runtime/models/architectures.h"
#include "src/runtime/models/hyperparameters.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

// Every sixth layer (5, 11, ...) attends globally, as Gemma 3's configuration fixes.
constexpr int kGemma3SlidingWindowPattern = 6;

absl::StatusOr<ModelDefinition> DefineGemma3(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    if (file.FindValue(p + key) != nullptr) {
      return ConfigUnimplemented(file, absl::StrCat("metadata key '", p, key, "' (logit soft-capping) is not supported"));
    }
  }
  c.rope_style = RopeStyle::kNeox;
  HETERO_ASSIGN_OR_RETURN(const int window, GetDimension(file, p + "attention.sliding_window"));
  HETERO_ASSIGN_OR_RETURN(const float local_base, GetPositiveFloatOr(file, p + "rope.freq_base_swa", 10000.0f));
  ModelDefinition d;
  d.family = "gemma";
  d.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  d.activation = FfnActivation::kGeluTanh;
  // Queries are scaled by query_pre_attn_scalar^-1/2, which Gemma 3 sets to the head size,
  // except the 27B model (62 layers): n_embd / n_heads. GGUF does not carry it.
  d.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.n_layers == 62 ? c.n_embd / c.n_heads : c.head_dim));
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition l = StandardLayer(i, c);
    const std::string b = absl::StrCat("blk.", i, ".");
    AddQkNorms(i, l);
    l.post_attn_norm = b + "post_attention_norm.weight";
    l.post_ffn_norm = b + "post_ffw_norm.weight";
    if (i % kGemma3SlidingWindowPattern != kGemma3SlidingWindowPattern - 1) {
      l.sliding_window = window;
      l.rope_freq_base = local_base;
      l.rope_linear_factor = 1.0f;
    }
    d.layers.push_back(std::move(l));
  }
  AddFeature(c, absl::StrCat("sliding-window attention (", window, " positions, RoPE base ", local_base,
                             ") on 5 of every 6 layers, global attention on the rest"));
  AddFeature(c, "per-head RMS norms on queries and keys");
  AddFeature(c, "RMS norms after attention and after the FFN");
  AddFeature(c, "GeGLU feed-forward (tanh GELU)");
  AddFeature(c, absl::StrCat("embeddings scaled by ", d.embedding_scale, ", attention by ", d.attention_scale));
  return d;
}

constexpr Architecture kGemmaFamily[] = {
    {"gemma3", DefineGemma3},
};

}  // namespace

absl::Span<const Architecture> GemmaFamily() { return kGemmaFamily; }

}  // namespace hetero
