#include "src/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "src/cpu/cpu_features.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/kv_layout.h"

namespace hetero {
namespace internal {

void AttendDecodePortable(const DecodeQuery& query, float* scores, float* out) {
  const int hd = query.head_dim;
  const int n = query.n_keys;
  const int bt = query.block_tokens;
  const int f = query.first_key;
  const size_t ld = static_cast<size_t>(n + 15) / 16 * 16;
  for (int h = 0; h < query.group; ++h) {
    const float* qv = query.q + static_cast<size_t>(h) * hd;
    float* s = scores + h * ld;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) {
      const float* k = query.blocks[(j + f) / bt] + query.k_offset + static_cast<size_t>((j + f) % bt) * hd;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < hd; ++d) dot += qv[d] * k[d];
      s[j] = dot * query.scale;
      max_score = std::max(max_score, s[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
    float* o = out + static_cast<size_t>(h) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int j = 0; j < n; ++j) {
      const float* v = query.blocks[(j + f) / bt] + query.v_offset + static_cast<size_t>((j + f) % bt) * hd;
      const float p = s[j];
#pragma omp simd
      for (int d = 0; d < hd; ++d) o[d] += p * v[d];
    }
    for (int d = 0; d < hd; ++d) o[d] *= inv;
  }
}

}  // namespace internal

void Attention::RunRow(const float* q, int position, const SequenceKv& kv, int window, float* out) const {
  const int hd = s_.head_dim;
  const int group = s_.n_heads / s_.n_kv_heads;
  // Offsets within one layer's region of a block (src/runtime/kv_layout.h).
  const KvBlockLayout layer{/*n_layers=*/1, s_.n_kv_heads, hd, s_.block_tokens};
  static const bool avx512 = DetectCpu().avx512f;
  const bool simd = avx512 && hd % 16 == 0;
  // A sliding window sees positions position - window + 1 .. position.
  const int first = window > 0 ? std::max(0, position + 1 - window) : 0;
  const int first_block = first / s_.block_tokens;
  const int n_keys = position + 1 - first;
  // Scratch per thread, grown to the longest row, 64-byte aligned (the kernel's
  // 16-float stores then never split cache lines).
  thread_local std::vector<float> scratch;
  const size_t floats = static_cast<size_t>(group) * ((n_keys + 15) / 16 * 16);
  if (scratch.size() < floats + 16) scratch.resize(floats + 16);
  float* scores = scratch.data();
  while (reinterpret_cast<uintptr_t>(scores) % 64 != 0) ++scores;
  for (int g = 0; g < s_.n_kv_heads; ++g) {
    internal::DecodeQuery query{q + static_cast<size_t>(g) * group * hd,
                                group,
                                hd,
                                n_keys,
                                first - first_block * s_.block_tokens,
                                kv.blocks.data() + first_block,
                                s_.block_tokens,
                                layer.Offset(0, /*values=*/false, g, 0),
                                layer.Offset(0, /*values=*/true, g, 0),
                                s_.scale};
    float* o = out + static_cast<size_t>(g) * group * hd;
    if (simd) {
      internal::AttendDecodeAvx512(query, scores, o);
    } else {
      internal::AttendDecodePortable(query, scores, o);
    }
  }
}

void Attention::Run(const float* q, int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
                    int window, float* out) const {
  const size_t row_floats = static_cast<size_t>(s_.n_heads) * s_.head_dim;
  // Later rows of a prompt attend to more keys: dynamic scheduling balances them.
  ParallelFor(rows, ThreadPool::Schedule::kDynamic,
              [&](int r) { RunRow(q + r * row_floats, positions[r], *kv[r], window, out + r * row_floats); });
}

}  // namespace hetero
