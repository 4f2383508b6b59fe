// The CUDA backend's own kernels: everything a transformer layer needs besides the cuBLAS
// GEMMs of long prompts. Activations are float32 throughout; weights are read either as
// their GGUF blocks (decode GEMVs, so decode moves as few bytes as the file holds) or as
// float16 (cuBLAS, and GEMVs of formats with no block kernel).
#ifndef HETERO_GPU_CUDA_KERNELS_CUH_
#define HETERO_GPU_CUDA_KERNELS_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hetero::gpu {

// Rows the GEMV kernel takes at once, and so the passes that use it: beyond 8 rows cuBLAS
// is faster (on the H200, 2026-11-30, 32-row decode ran at 3718 tokens/s on this kernel
// against 4876 on cuBLAS; docs/PERFORMANCE.md).
inline constexpr int kMaxGemvRows = 8;
inline constexpr int kGemvPassRows = kMaxGemvRows;
inline constexpr int kBlockGemvPassRows = 32;  // a model with block-format matrices (cuda_model.cu)
// Passes of up to this many rows (decode batches) are captured as CUDA graphs.
inline constexpr int kGraphMaxRows = 64;
// Head dimensions the attention kernel supports: a multiple of 32, at most 32 * this.
inline constexpr int kMaxHeadDimPerLane = 8;

struct KvLayout {
  float* pool;              // kv_blocks blocks
  size_t block_floats;      // n_layers * 2 * n_kv_heads * block_tokens * head_dim
  size_t layer_floats;      // 2 * n_kv_heads * block_tokens * head_dim
  size_t head_floats;       // block_tokens * head_dim
  int block_tokens;
};

// Where a forward pass's rows go: all device pointers.
struct RowMap {
  const int32_t* tokens;
  const int32_t* positions;
  const int32_t* seq_of_row;
  const int32_t* block_tables;
  int table_stride;
};

// One matrix of a GEMV launch: y[m * n + j] (+)= sum_i W[j, i] x'[m, i].
struct GemvSegment {
  const void* weights;  // GGUF blocks (format 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0, 12 Q4_K,
                        // 13 Q5_K, 14 Q6_K) or float16 rows (format 1)
  float* out;           // row m at out + m * ld
  int n;
  int ld;
  bool accumulate;      // add to `out` (the residual stream) instead of overwriting it
  float scale = 1.0f;   // what is added is scale times the product (a residual scale)
};
// Up to three matrices of one format and input width multiplied by the same rows in one
// launch (q, k, v). With `norm_weight`, x' is x RMS-normalised per row and scaled by it
// (the layer's norm, fused). With `swiglu`, segments 0 and 1 are gate and up and segment
// 0's out receives act(gate) * up, act SiLU or, with gelu, GELU (tanh form).
struct GemvLaunch {
  GemvSegment segments[3];
  int n_segments = 0;
  int format = 0;
  int k = 0;
  const float* x = nullptr;
  int rows = 0;  // 1..kMaxGemvRows
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  bool swiglu = false;
  bool gelu = false;
};
cudaError_t LaunchGemv(const GemvLaunch& launch, cudaStream_t stream);

// out[r] = scale * table[tokens[r]], the table in a GEMV format (float16 rows or GGUF
// blocks); cudaErrorInvalidValue for another format or a width that is not whole units.
cudaError_t LaunchEmbed(int format, const void* table, const int32_t* tokens, int rows, int n_embd, float scale,
                        float* out, cudaStream_t stream);
// A rows x k matrix in a GEMV block format, as row-major float16 into `out` (the prompt
// path's cuBLAS reads quantized weights through this, a matrix at a time, so the GPU keeps
// no float16 copy of them); cudaErrorInvalidValue for an unknown format or shape.
cudaError_t LaunchDequantizeToHalf(int format, const void* weights, int rows, int k, __half* out, cudaStream_t stream);
// out[r] = x[index ? index[r] : r] normalised by its RMS, times weight; into `out` (float)
// or, when given, `out_half`.
void LaunchRmsNorm(const float* x, const int32_t* index, const float* weight, int rows, int n, float eps, float* out,
                   __half* out_half, cudaStream_t stream);
// x[r] += scale * (norm ? rms_norm(t[r]) * norm : t[r]), rows of n: a block's output joining
// the residual stream.
void LaunchAddToResidual(float* x, const float* t, const float* norm, int rows, int n, float eps, float scale,
                         cudaStream_t stream);
void LaunchToHalf(const float* x, size_t count, __half* out, cudaStream_t stream);
// act(gate_up[r, i]) * gate_up[r, n_ff + i] (rows of 2 n_ff in, n_ff out), act SiLU or, with
// gelu, GELU (tanh form), into `out` or, when given, `out_half`.
void LaunchGatedActivation(const float* gate_up, int rows, int n_ff, bool gelu, float* out, __half* out_half,
                           cudaStream_t stream);
// Rows of `qkv` hold q, k and v side by side (row stride `qkv_stride`). Adds biases (may be
// null), RMS-norms q and k (norms may be null; per head, or over each whole vector),
// rotates q and k, and stores k and v into the KV blocks.
struct RopeArgs {
  int n_heads, n_kv_heads, head_dim, rope_dim;
  bool neox;
  const double* inv_freq;  // rope_dim / 2, device
  float attn_factor = 1.0f;  // multiplies the rotated dimensions
};
struct QkvSteps {
  const float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr;
  bool qk_norm_per_head = true;
  float eps = 0.0f;
};
void LaunchRopeAndStore(float* qkv, int qkv_stride, const QkvSteps& steps, int rows, const RopeArgs& rope,
                        const RowMap& map, const KvLayout& kv, int layer, cudaStream_t stream);
// out[r, h] = softmax(scale q k^T) v over the row's keys: positions 0..positions[r], or with
// window > 0 the last `window` of them; row r's queries at q + r * q_stride.
void LaunchAttention(const float* q, int q_stride, int rows, int n_heads, int n_kv_heads, int head_dim, float scale,
                     int window, const RowMap& map, const KvLayout& kv, int layer, float* out, cudaStream_t stream);

// A mixture-of-experts feed-forward step over `rows` normed inputs h (cuda_experts.cu): the
// router's float32 logits, each row's `used` most probable experts (softmax, ties to the lower
// id, ascending by id) with their probabilities (divided by the chosen ones' sum with
// `normalize`), act(gate_e h) * (up_e h) for each choice, and out[r] = the choices' down_e
// products weighted by those probabilities, or out[r] += scale times that with `accumulate`.
// gate/up are [n_experts * n_ff rows x n_embd] stacked expert by expert, down [n_experts *
// n_embd rows x n_ff], in a GEMV format (1 float16, or GGUF blocks as GemvSegment says).
inline constexpr int kMaxExpertsUsed = 16;
struct ExpertStep {
  const float* h = nullptr;
  int rows = 0, n_embd = 0, n_experts = 0, used = 0, n_ff = 0;
  bool normalize = false, gelu = false;
  const float* router = nullptr;  // n_experts x n_embd
  int gate_up_format = 0, down_format = 0;
  const void *gate = nullptr, *up = nullptr, *down = nullptr;
  // Each expert's slot in gate/up/down (n_experts entries; null: its id); -1: not held
  // here, the choice contributes nothing (the host evaluates it).
  const int32_t* slot_of = nullptr;
  // Scratch: rows x n_experts logits, rows x used choices and weights, rows x used x n_ff act.
  float* logits = nullptr;
  int32_t* choices = nullptr;
  float* weights = nullptr;
  // n_experts counters: each row's chosen experts add one each (null: not counted).
  unsigned long long* counts = nullptr;
  float* act = nullptr;
  float* out = nullptr;
  bool accumulate = false;
  float scale = 1.0f;
};
cudaError_t LaunchExperts(const ExpertStep& step, cudaStream_t stream);
// out[r] += scale * sigmoid(h[r] . gate_input) * shared[r], rows of n_embd (Qwen2-MoE's
// shared expert joining the routed sum).
void LaunchAddGatedShared(const float* h, const float* gate_input, const float* shared, int rows, int n_embd, float scale,
                          float* out, cudaStream_t stream);

// out[i] += scale * add[i] for i < n (the host's experts joining the device's).
void LaunchAddScaled(float* out, const float* add, size_t n, float scale, cudaStream_t stream);

// out[r] = the first index of the largest of logits[r * n .. r * n + n).
void LaunchArgmax(const float* logits, int rows, int n, int32_t* out, cudaStream_t stream);

}  // namespace hetero::gpu

#endif  // HETERO_GPU_CUDA_KERNELS_CUH_
