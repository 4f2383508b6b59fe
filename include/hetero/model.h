// A model loaded from a GGUF file: its configuration and a summary of its tensors.
// Immutable after loading and safe to share between threads.
#ifndef HETERO_MODEL_H_
#define HETERO_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/export.h"

namespace hetero {

// Where the default model lives relative to the working directory (see ResolveModelPath).
inline constexpr char kDefaultModelPath[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Finds the model to load: `explicit_path` if not empty, else $HETERO_MODEL if set and not
// empty, else kDefaultModelPath. The chosen file must exist; NotFound otherwise, with a
// message that says how to fetch the default model.
HETERO_EXPORT absl::StatusOr<std::string> ResolveModelPath(const std::string& explicit_path);

// How rotary position embedding pairs the dimensions of a head.
enum class RopeStyle {
  kNormal,  // adjacent pairs (2i, 2i+1): llama
  kNeox,    // halves (i, i + rope_dim/2): qwen2
};

enum class RopeScaling {
  kNone,
  kLinear,  // positions divided by rope_scaling_factor
};

struct ModelConfig {
  std::string architecture;  // general.architecture: "llama", "qwen2", "qwen3", "gemma3", "phi3", ...
  std::string name;          // general.name, empty when absent
  int n_layers = 0;
  int n_embd = 0;      // hidden size
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (grouped-query attention when < n_heads)
  int head_dim = 0;    // size of one query/key head
  int head_dim_v = 0;  // size of one value head
  int n_ff = 0;        // feed-forward hidden size
  int n_vocab = 0;
  int context_length = 0;  // trained context
  int rope_dim = 0;        // dimensions of a head that are rotated
  float rope_freq_base = 10000.0f;
  RopeStyle rope_style = RopeStyle::kNormal;
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scaling_factor = 1.0f;
  bool has_rope_freq_factors = false;  // per-pair RoPE factors: rope_freqs.weight (Llama 3.1), Phi-3's LongRoPE factors
  float rms_norm_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight: logits use token_embd.weight
  bool attention_bias = false;   // q/k/v projections carry biases
  int sliding_window = 0;        // positions a windowed layer's query sees (0: every layer is global)
  // Mixture of experts (0 experts: a dense FFN of n_ff): experts per layer, how many each
  // token runs, and one expert's hidden size.
  int n_experts = 0;
  int n_experts_used = 0;
  int n_ff_expert = 0;
  // What the architecture adds to the plain llama layer, one line each for people
  // (hetero-inspect), e.g. "per-head RMS norms on queries and keys".
  std::vector<std::string> features;
};

struct TensorSummary {
  std::string name;
  std::string type;            // "Q4_1", "F32", ...
  std::vector<int64_t> shape;  // ggml order: the contiguous dimension first
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

class HETERO_EXPORT Model {
 public:
  // Maps and validates a GGUF file: the header and every tensor bound, the configuration,
  // and that every tensor the architecture needs exists with the expected shape and a
  // supported type. Errors name the file and the offending key, tensor or byte offset.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const std::string& path() const;
  uint64_t file_size() const;
  uint32_t gguf_version() const;
  const std::vector<TensorSummary>& tensors() const;
  uint64_t parameter_count() const;
  // The weight bytes, as stored in the file, that one decode step of one sequence reads:
  // every tensor the architecture uses, but of the token embedding one row (unless it is
  // also the output matrix, read whole), and of a mixture of experts' routed expert tensors
  // the chosen share (n_experts_used of n_experts). Decode's tokens/s times this is the rate
  // at which weights are read; set against the memory's bandwidth it says how near decode is
  // to its bound (hetero-bench prints it).
  uint64_t decode_weight_bytes() const;
  // Tensors in the file that the architecture does not use (kept, not an error).
  const std::vector<std::string>& unused_tensors() const;

  // Library-internal state (the parsed GGUF file); opaque to users.
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hetero

#endif  // HETERO_MODEL_H_
