// The Phi family: Phi-3 and Phi-4 (both "phi3" in GGUF). Queries, keys and values come
// from one fused matrix (attn_qkv), gate and up from another (ffn_up: gate rows first);
// NeoX RoPE, with LongRoPE's per-frequency factors and attention factor where the file has
// them; a sliding window where the file sets one.
#include "absl/strings/str_cat.h"
#include "src/runtime/models/architectures.h"
#include "src/runtime/models/hyperparameters.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

absl::StatusOr<ModelDefinition> DefinePhi3(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  c.rope_style = RopeStyle::kNeox;
  int window = 0;
  if (file.FindValue(p + "attention.sliding_window") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(uint64_t w, file.GetUint64(p + "attention.sliding_window"));
    if (w > 0) {
      HETERO_ASSIGN_OR_RETURN(window, GetDimension(file, p + "attention.sliding_window"));
    }
  }
  ModelDefinition d;
  d.family = "phi";
  // LongRoPE: the long factors past the original context, the short ones within it. hetero
  // sizes its cache for the file's whole context, so that decides.
  const bool has_long = file.FindTensor("rope_factors_long.weight") != nullptr;
  if (has_long || file.FindTensor("rope_factors_short.weight") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(const int original, GetDimensionOr(file, p + "rope.scaling.original_context_length",
                                                               c.context_length));
    d.rope_freqs = has_long && c.context_length > original ? "rope_factors_long.weight" : "rope_factors_short.weight";
    c.has_rope_freq_factors = true;
    HETERO_ASSIGN_OR_RETURN(d.rope_attn_factor, GetPositiveFloatOr(file, p + "rope.scaling.attn_factor", 1.0f));
    AddFeature(c, absl::StrCat("LongRoPE (", d.rope_freqs, ", attention factor ", d.rope_attn_factor, ")"));
  }
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition l = StandardLayer(i, c);
    const std::string b = absl::StrCat("blk.", i, ".");
    const std::string qkv = b + "attn_qkv.weight";
    l.q = {qkv, 0, q_dim};
    l.k = {qkv, q_dim, kv_dim};
    l.v = {qkv, q_dim + kv_dim, kv_dim};
    const std::string gate_up = b + "ffn_up.weight";
    l.gate = {gate_up, 0, c.n_ff};
    l.up = {gate_up, c.n_ff, c.n_ff};
    l.sliding_window = window;
    d.layers.push_back(std::move(l));
  }
  AddFeature(c, "fused q|k|v and gate|up matrices");
  if (window > 0) AddFeature(c, absl::StrCat("sliding-window attention (", window, " positions) on every layer"));
  return d;
}

constexpr Architecture kPhiFamily[] = {
    {"phi3", DefinePhi3},
};

}  // namespace

absl::Span<const Architecture> PhiFamily() { return kPhiFamily; }

}  // namespace hetero
