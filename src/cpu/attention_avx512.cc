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

// The 16 lanes' sum by SumFour's tree, spelled out: GCC's _mm512_reduce_add_ps happens to
// use the same one, but clang leaves a reduction's order to the compiler.
inline float SumTree(__m512 a) {
  const __m256 s1 = _mm256_add_ps(_mm512_castps512_ps256(a),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));  // a[i] + a[i+8]
  const __m128 s2 = _mm_add_ps(_mm256_castps256_ps128(s1), _mm256_extractf128_ps(s1, 1));         // s1[i] + s1[i+4]
  const __m128 s3 = _mm_add_ps(s2, _mm_shuffle_ps(s2, s2, 0x4E));                                 // s2[i] + s2[i^2]
  return _mm_cvtss_f32(_mm_add_ss(s3, _mm_shuffle_ps(s3, s3, 0x55)));                              // s3[0] + s3[1]
}

// Keys (or values) one after another through the paged blocks, without a division per key.
struct KeyWalker {
  const float* const* blocks;
  size_t offset;  // k_offset or v_offset
  int block_tokens, head_dim;
  int block, slot;
  KeyWalker(const DecodeQuery& query, size_t offset)
      : blocks(query.blocks),
        offset(offset),
        block_tokens(query.block_tokens),
        head_dim(query.head_dim),
        block(query.first_key / query.block_tokens),
        slot(query.first_key % query.block_tokens) {}
  const float* Next() {
    const float* p = blocks[block] + offset + static_cast<size_t>(slot) * head_dim;
    if (++slot == block_tokens) {
      slot = 0;
      ++block;
    }
    return p;
  }
};

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
template <int H, int W>
inline void WeightedValueColumns(const float* p, size_t ld, int n, KeyWalker value, int col, const float* inv,
                                 int hd, float* out) {
  __m512 acc[H][W];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int u = 0; u < W; ++u) acc[h][u] = _mm512_setzero_ps();
  }
  for (int j = 0; j < n; ++j) {
    const float* v = value.Next() + col;
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
template <int H>
inline void WeightedValues(const float* p, size_t ld, int n, const KeyWalker& value, const float* inv, int hd,
                           float* out) {
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


// Transposed keys (DecodeQuery::kt): the same scores as ScoreFourKeys and the tail's
// SumTree, bit for bit, sixteen keys per vector and no horizontal sums.
// Those compute, per (head, key), lane l's chain q[l] k[l], then + q[16c + l] k[16c + l]
// fused for c = 1, 2, ..., and sum the 16 lanes by one fixed tree: s1[i] = a[i] + a[i + 8],
// s2[i] = s1[i] + s1[i + 4], s3[i] = s2[i] + s2[i + 2], s3[0] + s3[1]. Here lane l's chain
// runs for sixteen keys at once over rows l, 16 + l, ... of the transposed keys, and the
// tree is vertical adds, evaluated depth first so that M heads need about 5 M registers.
// A transposed key vector is loaded once into a register for all M heads: left to itself
// GCC folds the load into each head's multiply-add, M 64-byte loads where one will do.
inline __m512 LoadKeys(const float* p) {
  __m512 k = _mm512_loadu_ps(p);
  asm("" : "+v"(k));
  return k;
}

// C: the head dimension's 16-float chunks when known at compile time (the common 64 and
// 128, unrolled), or 0 to read it from hd.
template <int M, int C, int L>
inline void LaneChains(const float* q, int hd, const float* kt, size_t ld, __m512* a) {
  const int chunks = C > 0 ? C : hd / 16;
  const __m512 k0 = LoadKeys(kt + static_cast<size_t>(L) * ld);
#pragma GCC unroll 4
  for (int h = 0; h < M; ++h) a[h] = _mm512_mul_ps(_mm512_set1_ps(q[h * hd + L]), k0);
#pragma GCC unroll 8
  for (int c = 1; c < chunks; ++c) {
    const __m512 k = LoadKeys(kt + static_cast<size_t>(16 * c + L) * ld);
#pragma GCC unroll 4
    for (int h = 0; h < M; ++h) a[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * hd + 16 * c + L]), k, a[h]);
  }
}

// Lanes L and L + Span of the tree's level Span (Span = 8: lane chains; 4, 2, 1: sums).
template <int M, int C, int L, int Span>
inline void TreeNode(const float* q, int hd, const float* kt, size_t ld, __m512* out) {
  __m512 right[M];
  if constexpr (Span == 8) {
    LaneChains<M, C, L>(q, hd, kt, ld, out);
    LaneChains<M, C, L + 8>(q, hd, kt, ld, right);
  } else {
    TreeNode<M, C, L, Span * 2>(q, hd, kt, ld, out);
    TreeNode<M, C, L + Span, Span * 2>(q, hd, kt, ld, right);
  }
#pragma GCC unroll 4
  for (int h = 0; h < M; ++h) out[h] = _mm512_add_ps(out[h], right[h]);
}

// The scaled scores of M heads (q: M x hd) against n keys from kt: head h's at out + h * ld_out.
template <int M, int C>
inline void TransposedScores(const float* q, int hd, const float* kt, size_t kt_ld, int n, float scale, float* out,
                             size_t ld_out) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int j = 0; j < n; j += 16) {
    __m512 total[M];
    TreeNode<M, C, 0, 1>(q, hd, kt + j, kt_ld, total);
    const __mmask16 m = n - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - j)) - 1);
#pragma GCC unroll 4
    for (int h = 0; h < M; ++h) _mm512_mask_storeu_ps(out + h * ld_out + j, m, _mm512_mul_ps(total[h], vscale));
  }
}

template <int M>
void TransposedScoresAnyDim(const float* q, int hd, const float* kt, size_t kt_ld, int n, float scale, float* out,
                            size_t ld_out) {
  switch (hd) {
    case 64: TransposedScores<M, 4>(q, hd, kt, kt_ld, n, scale, out, ld_out); break;
    case 128: TransposedScores<M, 8>(q, hd, kt, kt_ld, n, scale, out, ld_out); break;
    default: TransposedScores<M, 0>(q, hd, kt, kt_ld, n, scale, out, ld_out); break;
  }
}

}  // namespace

void TransposeKeysAvx512(const float* const* blocks, int block_tokens, size_t k_offset, int head_dim, int first_key,
                         int n_keys, float* kt, size_t ld) {
  // Sixteen keys of one block per gather (slot s's dimension d at s * head_dim + d).
  __m512i slots = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                     _mm512_set1_epi32(head_dim));
  for (int j = 0; j < n_keys;) {
    const int key = first_key + j;
    const int slot = key % block_tokens;
    int take = block_tokens - slot < 16 ? block_tokens - slot : 16;
    if (n_keys - j < take) take = n_keys - j;
    const __mmask16 m = take == 16 ? 0xFFFF : static_cast<__mmask16>((1u << take) - 1);
    const float* base = blocks[key / block_tokens] + k_offset + static_cast<size_t>(slot) * head_dim;
    for (int d = 0; d < head_dim; ++d) {
      const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, slots, base + d, 4);
      _mm512_mask_storeu_ps(kt + static_cast<size_t>(d) * ld + j, m, v);
    }
    j += take;
  }
}

void WeightedPartsAvx512(int parts, const float* weights, const float* outs, size_t part_stride, int head_dim,
                         float* out) {
  for (int c = 0; c < head_dim; c += 64) {
    const int w = head_dim - c >= 64 ? 4 : (head_dim - c) / 16;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int p = 0; p < parts; ++p) {
      const __m512 weight = _mm512_set1_ps(weights[p]);
      const float* part = outs + static_cast<size_t>(p) * part_stride + c;
      for (int u = 0; u < w; ++u) acc[u] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(part + 16 * u), acc[u]);
    }
    for (int u = 0; u < w; ++u) _mm512_storeu_ps(out + c + 16 * u, acc[u]);
  }
}

void AttendDecodeAvx512(const DecodeQuery& query, float* scores, float* out) {
  const int hd = query.head_dim;
  const int chunks = hd / 16;
  const int n = query.n_keys;
  KeyWalker key(query, query.k_offset);
  const KeyWalker value(query, query.v_offset);
  const size_t ld = static_cast<size_t>(n + 15) / 16 * 16;  // scores row stride

  // Scores, four keys at a time (one combined horizontal sum), then the rest one by one.
  // Up to four heads at a time share each load of the keys: loads, not multiply-adds, bound
  // this loop otherwise (Zen 4 loads one 64-byte vector per cycle). Each (head, key) score
  // is the same chain of one multiply and fused multiply-adds in chunk order however the
  // heads are grouped, so its bits depend on neither.
  int j0 = 0;
  if (query.kt != nullptr) {
    for (int h0 = 0; h0 < query.group; h0 += 4) {
      const float* q = query.q + static_cast<size_t>(h0) * hd;
      float* s = scores + h0 * ld;
      switch (query.group - h0) {
        case 1: TransposedScoresAnyDim<1>(q, hd, query.kt, query.kt_ld, n, query.scale, s, ld); break;
        case 2: TransposedScoresAnyDim<2>(q, hd, query.kt, query.kt_ld, n, query.scale, s, ld); break;
        case 3: TransposedScoresAnyDim<3>(q, hd, query.kt, query.kt_ld, n, query.scale, s, ld); break;
        default: TransposedScoresAnyDim<4>(q, hd, query.kt, query.kt_ld, n, query.scale, s, ld); break;
      }
    }
    j0 = n;  // every score taken
  }
  for (; j0 + 4 <= n; j0 += 4) {
    const float* k[4];
    for (const float*& p : k) p = key.Next();
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
    const float* k = key.Next();
    for (int h = 0; h < query.group; ++h) {
      const float* q = query.q + static_cast<size_t>(h) * hd;
      __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k));
      for (int c = 1; c < chunks; ++c) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), _mm512_loadu_ps(k + 16 * c), acc);
      scores[h * ld + j] = SumTree(acc) * query.scale;
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
