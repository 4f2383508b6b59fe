// Tiny but complete GGUF models of every architecture hetero runs (llama, qwen2, qwen3,
// gemma3, phi3, ...) with random weights, written by the tests themselves so that most
// tests need no downloaded model.
#ifndef HETERO_TESTS_SUPPORT_TINY_MODEL_H_
#define HETERO_TESTS_SUPPORT_TINY_MODEL_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/support/gguf_builder.h"

namespace hetero::testing {

struct TinyModelOptions {
  // "llama", "qwen2" (adds q/k/v biases), "qwen3" (q/k norms), "gemma3" (q/k norms and
  // post-block norms; needs sliding_window), "phi3" (fused q|k|v and gate|up), or any
  // other llama-shaped architecture name (e.g. "granite", with float_keys). With
  // n_experts > 0, layers have experts in place of the dense FFN: "llama" (Mixtral),
  // "granitemoe", "olmoe" (q/k norms over the whole vectors), "qwen2moe" (biases and a
  // shared expert), "qwen3moe" (per-head q/k norms).
  std::string architecture = "llama";
  int n_layers = 2;
  int n_embd = 64;
  int n_heads = 4;
  int n_kv_heads = 2;
  int n_ff = 96;
  int n_vocab = 100;
  int context_length = 256;
  float rope_freq_base = 10000.0f;
  float rms_norm_eps = 1e-5f;
  int head_dim = 0;        // 0: n_embd / n_heads; else written as attention.key_length/value_length
  int sliding_window = 0;  // > 0: written as attention.sliding_window
  bool rope_freq_factors = false;  // writes rope_freqs.weight (Llama 3.1 style), values in [1, 8)
  std::map<std::string, float> float_keys;  // more "<arch>.<key>" metadata (granite's scales)
  bool tied_embeddings = true;
  int n_experts = 0;
  int n_experts_used = 0;
  int n_ff_expert = 0;  // > 0: written as expert_feed_forward_length (else experts are n_ff wide)
  int n_ff_shared = 0;  // qwen2moe's shared expert, written as expert_shared_feed_forward_length
  // Matrices (expert tensors included; routers stay F32, with values of scale 0.5 so
  // that experts are chosen by clear margins): F32, F16, or random blocks of a quantized type (Q4_0, Q4_1, Q8_0, Q5_0,
  // Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS); norms and biases stay F32.
  TensorType weight_type = TensorType::kF32;
  // Per matrix, by name without the "blk.N." prefix (e.g. "ffn_down.weight"): a type other
  // than weight_type, as the mixed files (Q4_K_M, ...) have.
  std::map<std::string, TensorType> tensor_types;
  uint32_t seed = 1;
  // Test hooks: tensors to leave out, and shapes to write instead of the right ones.
  std::set<std::string> omit_tensors;
  std::map<std::string, std::vector<int64_t>> shape_overrides;
  // Metadata keys (without the "<arch>." prefix) to leave out.
  std::set<std::string> omit_keys;
};

// Weights come from a documented generator, so scripts/reference_forward.py can rebuild the
// identical model in NumPy: each tensor has its own stream, splitmix64 seeded with
// seed ^ fnv1a64(tensor name); a value is mean + scale * u with u = (next() >> 40) * 2^-23 - 1
// in float32 (exactly representable, in [-1, 1)). Quantized blocks take their bytes from the
// same stream (next() & 0xFF per byte), then set each of the type's fp16 fields, in order, to
// fp16(m * (scale / divisor) * (1.25 + u/4)), drawing u after the block's bytes; divisor and
// the fields' (offset, m) per type are in QuantFields (tiny_model.cc) and in the script.
//
// A builder holding the model's metadata and tensors; add to it or Build() it.
GgufBuilder TinyModelBuilder(const TinyModelOptions& options);

// Builds the model and writes it to a temp file; returns the path.
std::string WriteTinyModel(const TinyModelOptions& options, const std::string& file_name);

// A LoRA adapter in llama.cpp's GGUF adapter format for a model file: for each target (a
// base tensor name, e.g. "blk.0.attn_q.weight") a pair <target>.lora_a [inputs, rank] and
// <target>.lora_b [rank, outputs], the dimensions read from the model file. Values come
// from the tiny model's generator (scale * u, stream seeded with seed ^ fnv1a64(tensor
// name)), so scripts/reference_forward.py rebuilds them.
struct TinyAdapterOptions {
  std::string architecture = "llama";  // general.architecture
  std::vector<std::string> targets;
  int rank = 4;
  float alpha = 8.0f;  // adapter.lora.alpha; written unless write_alpha is false
  bool write_alpha = true;
  float scale = 0.05f;
  TensorType type = TensorType::kF32;  // F32 or F16
  uint32_t seed = 1;
  // Test hooks: general.type and adapter.type values, tensors to leave out, more tensors.
  std::string general_type = "adapter";
  std::string adapter_type = "lora";
  std::set<std::string> omit_tensors;
  std::map<std::string, std::vector<int64_t>> extra_f32_tensors;  // name -> dims (values 0.01)
};
std::string WriteTinyAdapter(const std::string& model_path, const TinyAdapterOptions& options,
                             const std::string& file_name);

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_TINY_MODEL_H_
