#include "src/cpu/lora_delta.h"

#include <vector>

#include "src/cpu/thread_pool.h"

namespace hetero {

void AddLoraDelta(const LoraMatrix& m, float scale, const float* x, int rows, float* y) {
  const int rank = m.rank, in = m.inputs, out = m.outputs;
  const float factor = scale * m.alpha_over_rank;
  ParallelFor(rows, ThreadPool::Schedule::kStatic, [&](int r) {
    const float* xr = x + static_cast<size_t>(r) * in;
    float* yr = y + static_cast<size_t>(r) * out;
    // t = A x: rank dot products, each in eight partial sums (a fixed order: a row's result
    // does not depend on the batch it runs in).
    float t[64];
    std::vector<float> t_heap;
    float* tr = t;
    if (rank > 64) {
      t_heap.resize(static_cast<size_t>(rank));
      tr = t_heap.data();
    }
    for (int j = 0; j < rank; ++j) {
      const float* a = m.a.data() + static_cast<size_t>(j) * in;
      float partial[8] = {};
      int i = 0;
      for (; i + 8 <= in; i += 8) {
        for (int k = 0; k < 8; ++k) partial[k] += a[i + k] * xr[i + k];
      }
      float sum = 0.0f;
      for (; i < in; ++i) sum += a[i] * xr[i];
      for (int k = 0; k < 8; ++k) sum += partial[k];
      tr[j] = sum * factor;
    }
    // y += t B^T: rank scaled rows of B^T.
    for (int j = 0; j < rank; ++j) {
      const float* b = m.b_t.data() + static_cast<size_t>(j) * out;
      const float tj = tr[j];
      for (int o = 0; o < out; ++o) yr[o] += tj * b[o];
    }
  });
}

}  // namespace hetero
