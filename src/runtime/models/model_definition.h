// What a model computes, declared once per architecture family (src/runtime/models/*.cc)
// over the GGUF's tensors and hyperparameters, and executed by every backend.
//
// Every architecture hetero runs is a stack of layers of one shape, each step present or
// absent as its definition says (names are LayerDefinition's fields):
//
//   x = embedding_scale * token_embd[token]
//   per layer:
//     h = rms_norm(x, attn_norm)
//     q, k, v = h·q (+ q_bias), h·k (+ k_bias), h·v (+ v_bias)
//     q, k = rms_norm_per_head(q, q_norm), rms_norm_per_head(k, k_norm)  (or over all of q, k)
//     q, k = rope(q, k; rope_freq_base, rope_freqs, rope_attn_factor)
//     a = attention(q, keys, values; attention_scale, sliding_window) · o
//     a = rms_norm(a, post_attn_norm)
//     x = x + residual_scale * a
//     h = rms_norm(x, ffn_norm)
//     f = (activation(h·gate) * h·up) · down                   (a dense FFN), or
//     f = sum over the experts e the router chose for this token of w_e * ffn_e(h)
//         (+ sigmoid(h·shared_gate_input) * ffn_shared(h))     (a mixture of experts)
//     f = rms_norm(f, post_ffn_norm)
//     x = x + residual_scale * f
//   logits = logit_scale * rms_norm(x, output_norm) · output
//
// Matrices are named by TensorSlice: a whole tensor, or a run of its rows (phi3's fused
// q|k|v and gate|up). A backend fuses what pays (the CPU runs q, k and v, and gate and up,
// as one step) but never needs to know which architecture it runs. What this shape cannot
// express is refused when the file is read, with the key or tensor named.
#ifndef HETERO_RUNTIME_MODELS_MODEL_DEFINITION_H_
#define HETERO_RUNTIME_MODELS_MODEL_DEFINITION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/model.h"
#include "src/runtime/gguf.h"

namespace hetero {

// Rows [row_begin, row_begin + rows) of a 2-D tensor (rows = its second ggml dimension);
// rows = 0 means all of them.
struct TensorSlice {
  std::string tensor;
  int64_t row_begin = 0;
  int64_t rows = 0;

  bool present() const { return !tensor.empty(); }
};

enum class FfnActivation { kSilu, kGeluTanh };

// A mixture-of-experts feed-forward block, in place of the layer's gate/up/down. The router
// ranks the experts by softmax(h·router); each token runs the `used` most probable, each
// weighted by its probability (divided by the chosen ones' sum where normalize_weights),
// and the weighted outputs are summed. Every expert's matrix of a kind is one 3-D tensor,
// [inputs, outputs, count] in ggml order, expert e's rows contiguous (ExpertMatrix).
struct ExpertsDefinition {
  std::string router;          // [n_embd, count]
  std::string gate, up, down;  // [n_embd, n_ff, count], [n_embd, n_ff, count], [n_ff, n_embd, count]
  int count = 0;
  int used = 0;
  int n_ff = 0;  // one expert's hidden size
  bool normalize_weights = false;
  // A shared expert that every token runs (Qwen2-MoE): its FFN output times
  // sigmoid(h·shared_gate_input), added to the routed sum. Empty names: none.
  std::string shared_gate_input;  // [n_embd]
  std::string shared_gate, shared_up, shared_down;
  int shared_n_ff = 0;

  bool present() const { return !router.empty(); }
  bool has_shared() const { return !shared_gate.empty(); }
};

// One layer. Empty names are absent steps.
struct LayerDefinition {
  std::string attn_norm;
  TensorSlice q, k, v;
  std::string q_bias, k_bias, v_bias;
  std::string q_norm, k_norm;  // RMS norm weights: per head (head_dim values) or, where
  bool qk_norm_per_head = true;  // false (OLMoE), one norm over all of q and one over all of k
  TensorSlice o;
  std::string post_attn_norm;
  std::string ffn_norm;
  TensorSlice gate, up, down;  // a dense FFN; absent where `experts` is present
  ExpertsDefinition experts;
  std::string post_ffn_norm;
  float rope_freq_base = 10000.0f;
  float rope_linear_factor = 1.0f;  // positions divided by it (linear RoPE scaling)
  int sliding_window = 0;  // > 0: a query sees only the last sliding_window positions (itself included)
};

struct ModelDefinition {
  std::string family;  // the definition file's family, e.g. "gemma"
  std::string token_embd = "token_embd.weight";
  std::string output_norm = "output_norm.weight";
  std::string output;      // the logits matrix; token_embd when tied
  std::string rope_freqs;  // per-pair frequency divisors (Llama 3.1, Phi-3 long context), rope_dim / 2
  float embedding_scale = 1.0f;
  float attention_scale = 0.0f;  // multiplies q·k; set by the definition (usually 1/sqrt(head_dim))
  float residual_scale = 1.0f;
  float logit_scale = 1.0f;
  float rope_attn_factor = 1.0f;  // multiplies the rotated dimensions of q and k
  FfnActivation activation = FfnActivation::kSilu;
  std::vector<LayerDefinition> layers;
};

// A tensor the definition reads, with the shape it must have.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;  // ggml order
  bool required;
  bool may_be_one_row = false;  // a vector the converters may write as a one-row matrix [n, 1]
};

// Every tensor `definition` reads, each once, with its shape (from `config`'s dimensions).
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config, const ModelDefinition& definition);

// The GgufTensorInfo of a slice: the tensor's own for a whole tensor, else a view of its
// rows (rows are contiguous in GGUF, so a run of rows is a run of bytes). The file must
// have passed ValidateModelTensors.
GgufTensorInfo SliceTensor(const GgufFile& file, const TensorSlice& slice);

// Expert `expert`'s matrix of a 3-D expert tensor (ExpertsDefinition): a 2-D view of its
// rows. The file must have passed ValidateModelTensors.
GgufTensorInfo ExpertMatrix(const GgufFile& file, const std::string& tensor, int expert);
// All of a 3-D expert tensor as one 2-D matrix: count x outputs rows, expert e's after
// expert e-1's (how the GPU reads a row's chosen expert). Same checks as ExpertMatrix.
GgufTensorInfo StackedExperts(const GgufFile& file, const std::string& tensor);

// The distinct RoPE frequency sets among a definition's layers, keyed by (base, linear
// factor) in order of first use (Gemma 3 has two), and each layer's index into them: what
// a backend computes one rotation table for.
struct RopeVariants {
  std::vector<std::pair<float, float>> base_and_factor;
  std::vector<int> of_layer;
};
RopeVariants DistinctRopes(const ModelDefinition& definition);

// The plain llama layer i (blk.i.attn_norm.weight, ... ffn_down.weight), without biases,
// with the config's RoPE base and linear factor: what most definitions start from.
LayerDefinition StandardLayer(int i, const ModelConfig& config);
// Layer i's q/k/v biases (blk.i.attn_{q,k,v}.bias), and its per-head q/k norms
// (blk.i.attn_{q,k}_norm.weight).
void AddAttentionBiases(int i, LayerDefinition& layer);
void AddQkNorms(int i, LayerDefinition& layer);
// Replaces layer i's dense FFN by the config's experts (blk.i.ffn_gate_inp.weight and
// blk.i.ffn_{gate,up,down}_exps.weight), the chosen weights renormalised or not as the
// architecture says; and adds Qwen2-MoE's shared expert (blk.i.ffn_*_shexp.weight).
void UseExperts(int i, const ModelConfig& config, bool normalize_weights, LayerDefinition& layer);
void AddSharedExpert(int i, int shared_n_ff, LayerDefinition& layer);
// "mixture of experts: 8 of 64 experts per token (...)", for config.features.
std::string DescribeExperts(const ExpertsDefinition& experts);

// Appends a human-readable line to config.features once (what `hetero-inspect` prints).
void AddFeature(ModelConfig& config, std::string feature);

}  // namespace hetero

#endif  // HETERO_RUNTIME_MODELS_MODEL_DEFINITION_H_
