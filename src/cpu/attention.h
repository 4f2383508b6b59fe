// Causal grouped-query attention over the paged KV cache, in f32.
//  - Prompt rows of one sequence (many queries): per head, scores = Q K^T and out = P V as
//    oneDNN matmuls (primitives with run-time sizes, created once), softmax by oneDNN.
//  - Single queries (decode): per row and head, vectorized dot products over the blocks.
#ifndef HETERO_CPU_ATTENTION_H_
#define HETERO_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/status/status.h"
#include "src/cpu/attention_kernels.h"
#include "src/cpu/linear.h"

namespace hetero {

struct AttentionShape {
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int block_tokens;
};

// Where one sequence's keys and values for one layer live: a pointer per KV block to the
// layer's [k|v][kv head][slot][dim] region.
struct SequenceKv {
  std::vector<const float*> blocks;
};


class Attention {
 public:
  Attention(const LinearContext& ctx, const AttentionShape& shape);

  // q: rows x (n_heads * head_dim); out: same shape. Row r attends to positions
  // 0..positions[r] of kv[r]. Rows that share a sequence must be consecutive.
  absl::Status Run(const float* q, int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
                   float* out);

 private:
  absl::Status RunPrompt(const float* q, int rows, int first_position, const SequenceKv& kv, float* out);
  void RunSingle(const float* q, int position, const SequenceKv& kv, float* out) const;

  const LinearContext& ctx_;
  AttentionShape s_;
  dnnl::matmul scores_;   // [rows, hd] x [hd, keys] -> [rows, keys], scaled by 1/sqrt(hd)
  dnnl::matmul mix_;      // [rows, keys] x [keys, hd] -> [rows, hd] (strided into the output)
  // Softmax over [rows, keys] is created per shape; the last one is kept (a prompt's layers
  // all share one shape).
  dnnl::softmax_forward softmax_;
  int softmax_rows_ = -1;
  int softmax_keys_ = -1;
  // Scratch reused across calls.
  std::vector<float> keys_, values_, probs_;
};

}  // namespace hetero

#endif  // HETERO_CPU_ATTENTION_H_
