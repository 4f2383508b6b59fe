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

// The scaled scores of H query heads (q: H x hd floats) against four keys: row h of the
// output (stride ld) gets four scores at out + h * ld.
template <int H>
inline void ScoreFourKeys(const float* q, int hd, const float* const* k, float scale, float* out, size_t ld) {
  __m512 acc[H][4];
  {
    const __m512 k0 = _mm512_loadu_ps(k[0]), k1 = _mm512_loadu_ps(k[1]), k2 = _mm512_loadu_ps(k[2]),
                 k3 = _mm512_loadu_ps(k[3]);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m512 qc = _mm512_loadu_ps(q + static_cast<size_t>(h) * hd);
      acc[h][0] = _mm512_mul_ps(qc, k0);
      acc[h][1] = _mm512_mul_ps(qc, k1);
      acc[h][2] = _mm512_mul_ps(qc, k2);
      acc[h][3] = _mm512_mul_ps(qc, k3);
    }
  }
  for (int c = 16; c < hd; c += 16) {
    const __m512 k0 = _mm512_loadu_ps(k[0] + c), k1 = _mm512_loadu_ps(k[1] + c), k2 = _mm512_loadu_ps(k[2] + c),
                 k3 = _mm512_loadu_ps(k[3] + c);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m512 qc = _mm512_loadu_ps(q + static_cast<size_t>(h) * hd + c);
      acc[h][0] = _mm512_fmadd_ps(qc, k0, acc[h][0]);
      acc[h][1] = _mm512_fmadd_ps(qc, k1, acc[h][1]);
      acc[h][2] = _mm512_fmadd_ps(qc, k2, acc[h][2]);
      acc[h][3] = _mm512_fmadd_ps(qc, k3, acc[h][3]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
    _mm_storeu_ps(out + h * ld, _mm_mul_ps(SumFour(acc[h][0], acc[h][1], acc[h][2], acc[h][3]), _mm_set1_ps(scale)));
  }
}

// out[h][col, col + 16 W) = inv[h] * the sum over keys j of p[h][j] * value j's same columns,
// for H heads whose probabilities are rows of p (stride ld). Each (head, column) is one
// chain of fused multiply-adds in key order from zero, however the heads are grouped.
template <int H, int W, typename ValueAt>
inline void WeightedValueColumns(const float* p, size_t ld, int n, const ValueAt& value, int col, const float* inv,
                                 int hd, float* out) {
  __m512 acc[H][W];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int u = 0; u < W; ++u) acc[h][u] = _mm512_setzero_ps();
  }
  for (int j = 0; j < n; ++j) {
    const float* v = value(j) + col;
    __m512 vc[W];
#pragma GCC unroll 4
    for (int u = 0; u < W; ++u) vc[u] = _mm512_loadu_ps(v + 16 * u);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m512 ph = _mm512_set1_ps(p[h * ld + j]);
#pragma GCC unroll 4
      for (int u = 0; u < W; ++u) acc[h][u] = _mm512_fmadd_ps(ph, vc[u], acc[h][u]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int u = 0; u < W; ++u) {
      _mm512_storeu_ps(out + static_cast<size_t>(h) * hd + col + 16 * u, _mm512_mul_ps(acc[h][u], _mm512_set1_ps(inv[h])));
    }
  }
}

// All of a head_dim's columns, four 16-float chunks at a time (independent chains).
template <int H, typename ValueAt>
inline void WeightedValues(const float* p, size_t ld, int n, const ValueAt& value, const float* inv, int hd, float* out) {
  const int chunks = hd / 16;
  for (int c0 = 0; c0 < chunks; c0 += 4) {
    switch (chunks - c0) {
      case 1: WeightedValueColumns<H, 1>(p, ld, n, value, 16 * c0, inv, hd, out); break;
      case 2: WeightedValueColumns<H, 2>(p, ld, n, value, 16 * c0, inv, hd, out); break;
      case 3: WeightedValueColumns<H, 3>(p, ld, n, value, 16 * c0, inv, hd, out); break;
      default: WeightedValueColumns<H, 4>(p, ld, n, value, 16 * c0, inv, hd, out); break;
    }
  }
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
  // Up to four heads at a time share each load of the keys: loads, not multiply-adds, bound
  // this loop otherwise (Zen 4 loads one 64-byte vector per cycle). Each (head, key) score
  // is the same chain of one multiply and fused multiply-adds in chunk order however the
  // heads are grouped, so its bits depend on neither.
  int j0 = 0;
  for (; j0 + 4 <= n; j0 += 4) {
    const float* k[4] = {key(j0), key(j0 + 1), key(j0 + 2), key(j0 + 3)};
    for (int h0 = 0; h0 < query.group; h0 += 4) {
      switch (query.group - h0) {
        case 1: ScoreFourKeys<1>(query.q + static_cast<size_t>(h0) * hd, hd, k, query.scale, scores + h0 * ld + j0, ld); break;
        case 2: ScoreFourKeys<2>(query.q + static_cast<size_t>(h0) * hd, hd, k, query.scale, scores + h0 * ld + j0, ld); break;
        case 3: ScoreFourKeys<3>(query.q + static_cast<size_t>(h0) * hd, hd, k, query.scale, scores + h0 * ld + j0, ld); break;
        default: ScoreFourKeys<4>(query.q + static_cast<size_t>(h0) * hd, hd, k, query.scale, scores + h0 * ld + j0, ld); break;
      }
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
  // Four heads at a time: each head's softmax numerators (16 scores at a time, the tail
  // masked), then their weighted values, the four sharing each load of a value.
  for (int h0 = 0; h0 < query.group; h0 += 4) {
    const int heads = query.group - h0 < 4 ? query.group - h0 : 4;
    float inv[4];
    for (int h = h0; h < h0 + heads; ++h) {
      float* s = scores + h * ld;
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
      inv[h - h0] = query.part_max != nullptr ? 1.0f : 1.0f / sum;
    }
    const float* s = scores + h0 * ld;
    float* o = out + static_cast<size_t>(h0) * hd;
    switch (heads) {
      case 1: WeightedValues<1>(s, ld, n, value, inv, hd, o); break;
      case 2: WeightedValues<2>(s, ld, n, value, inv, hd, o); break;
      case 3: WeightedValues<3>(s, ld, n, value, inv, hd, o); break;
      default: WeightedValues<4>(s, ld, n, value, inv, hd, o); break;
    }
  }
}

}  // namespace hetero::internal
