// The KV block layout every backend keeps, so that a block one device saved is valid on any
// other (the KV handoff and swaps copy blocks as they are). One block of block_tokens
// tokens holds, for each layer, the keys and then the values of every KV head, each head's
// slots one after another: [layer][k|v][kv head][slot][dim], float32. Header-only, for host
// code and CUDA kernels alike.
#ifndef HETERO_RUNTIME_KV_LAYOUT_H_
#define HETERO_RUNTIME_KV_LAYOUT_H_

#include <cstddef>

#if defined(__CUDACC__)
#define HETERO_KV_LAYOUT_FN __host__ __device__ inline
#else
#define HETERO_KV_LAYOUT_FN inline
#endif

namespace hetero {

struct KvBlockLayout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_tokens = 0;

  // One head's keys (or values) in a block.
  HETERO_KV_LAYOUT_FN size_t head_floats() const { return static_cast<size_t>(block_tokens) * head_dim; }
  // One layer's keys and values in a block.
  HETERO_KV_LAYOUT_FN size_t layer_floats() const { return 2 * static_cast<size_t>(n_kv_heads) * head_floats(); }
  HETERO_KV_LAYOUT_FN size_t block_floats() const { return static_cast<size_t>(n_layers) * layer_floats(); }
  HETERO_KV_LAYOUT_FN size_t bytes_per_token() const {
    return block_tokens > 0 ? block_floats() * sizeof(float) / static_cast<size_t>(block_tokens) : 0;
  }
  // Where the head_dim floats of (layer, keys or values, kv head, slot) start in a block.
  HETERO_KV_LAYOUT_FN size_t Offset(int layer, bool values, int kv_head, int slot) const {
    return static_cast<size_t>(layer) * layer_floats() +
           static_cast<size_t>((values ? n_kv_heads : 0) + kv_head) * head_floats() +
           static_cast<size_t>(slot) * head_dim;
  }
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_KV_LAYOUT_H_
