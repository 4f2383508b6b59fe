// AVX-512 decode attention (attention.h's single-query path). This file alone is compiled
// with -mavx512f -mfma; Attention checks the CPU first.
#include <immintrin.h>

#include <cmath>

#include "src/cpu/attention_kernels.h"
#include "src/cpu/avx512_math.h"

namespace hetero::internal {
namespace {

// The horizontal sums of four vectors, as one 4-float vector (14 shuffles and adds
// instead of four separate reductions' 24).
inline __m128 SumFour(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // 128-bit lane i now holds partial sums of a, b, c, d for i = 0..3.
  __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  x = _mm512_add_ps(x, _mm512_permute_ps(x, 0x4E));
  x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xB1));
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), x));
}

}  // namespace

void AttendDecodeAvx512(const DecodeQuery& query, float* scores, float* out) {
  const int hd = query.head_dim;
  const int chunks = hd / 16;
  const int n = query.n_keys;
  const int bt = query.block_tokens;
  const int f = query.first_key;
  const auto key = [&](int j) {
    return query.blocks[(j + f) / bt] + query.k_offset + static_cast<size_t>((j + f) % bt) * hd;
  };
  const auto value = [&](int j) {
    return query.blocks[(j + f) / bt] + query.v_offset + static_cast<size_t>((j + f) % bt) * hd;
  };
  const size_t ld = static_cast<size_t>(n + 15) / 16 * 16;  // scores row stride

  // Scores, four keys at a time (one combined horizontal sum), then the rest one by one.
  int j0 = 0;
  for (; j0 + 4 <= n; j0 += 4) {
    const float* k[4] = {key(j0), key(j0 + 1), key(j0 + 2), key(j0 + 3)};
    for (int h = 0; h < query.group; ++h) {
      const float* q = query.q + static_cast<size_t>(h) * hd;
      __m512 acc[4];
      for (int u = 0; u < 4; ++u) acc[u] = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k[u]));
      for (int c = 1; c < chunks; ++c) {
        const __m512 qc = _mm512_loadu_ps(q + 16 * c);
        for (int u = 0; u < 4; ++u) acc[u] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(k[u] + 16 * c), acc[u]);
      }
      _mm_storeu_ps(scores + h * ld + j0, _mm_mul_ps(SumFour(acc[0], acc[1], acc[2], acc[3]), _mm_set1_ps(query.scale)));
    }
  }
  for (int j = j0; j < n; ++j) {
    const float* k = key(j);
    for (int h = 0; h < query.group; ++h) {
      const float* q = query.q + static_cast<size_t>(h) * hd;
      __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k));
      for (int c = 1; c < chunks; ++c) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), _mm512_loadu_ps(k + 16 * c), acc);
      scores[h * ld + j] = _mm512_reduce_add_ps(acc) * query.scale;
    }
  }
  for (int h = 0; h < query.group; ++h) {
    float* s = scores + h * ld;
    // Softmax numerators, 16 scores at a time (the tail masked).
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += 16) {
      const __mmask16 m = n - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - j)) - 1);
      vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(vmax, m, s + j));
    }
    const float max_score = _mm512_reduce_max_ps(vmax);
    const __m512 max = _mm512_set1_ps(max_score);
    __m512 vsum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
      const __mmask16 m = n - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - j)) - 1);
      const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), max));
      _mm512_mask_storeu_ps(s + j, m, e);
      vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    const float sum = _mm512_reduce_add_ps(vsum);
    if (query.part_max != nullptr) {
      query.part_max[h] = max_score;
      query.part_sum[h] = sum;
    }
    const __m512 inv = _mm512_set1_ps(query.part_max != nullptr ? 1.0f : 1.0f / sum);
    // Weighted values, four 16-float column chunks (independent FMA chains) at a time.
    float* o = out + static_cast<size_t>(h) * hd;
    for (int c0 = 0; c0 < chunks; c0 += 4) {
      const int width = chunks - c0 < 4 ? chunks - c0 : 4;
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int j = 0; j < n; ++j) {
        const float* v = value(j) + 16 * c0;
        const __m512 p = _mm512_set1_ps(s[j]);
        for (int u = 0; u < width; ++u) acc[u] = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16 * u), acc[u]);
      }
      for (int u = 0; u < width; ++u) _mm512_storeu_ps(o + 16 * (c0 + u), _mm512_mul_ps(acc[u], inv));
    }
  }
}

}  // namespace hetero::internal
