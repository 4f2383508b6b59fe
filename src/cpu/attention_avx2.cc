// AVX2 decode attention (attention.h's per-row kernel) for CPUs without AVX-512. This file
// alone is compiled with -mavx2 -mfma; Attention checks the CPU first. The same steps as the
// AVX-512 kernel in 8-float vectors, its transposed-keys form for prompts included: the
// scores are the same bits either way, so a row's result depends only on its query and
// its keys.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "src/cpu/attention_kernels.h"
#include "src/cpu/avx2_math.h"

namespace hetero::internal {
namespace {

inline float Sum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float Max8(__m256 v) {
  const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
}

// The horizontal sums of four vectors as one 4-float vector. Every score's eight lane sums
// go through this one tree, ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), whichever
// keys and heads share a pass: a score depends only on its query and its key.
inline __m128 SumFour(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// Keys (or values) one after another through the paged blocks, without a division per key.
struct KeyWalker {
  const float* const* blocks;
  size_t offset;
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

// The scaled scores of H query heads (q: H x hd) against K keys (K <= 4): K scores at
// out + h * ld for each head h. Each key's chains share its loads across the heads, and
// each head's query chunk serves all K keys: three heads by three keys keep 13 of the 16
// vector registers busy with 6 loads per 9 multiply-adds.
template <int H, int K>
inline void ScoreKeys(const float* q, int hd, const float* const* k, float scale, float* out, size_t ld) {
  __m256 acc[H][K];
#pragma GCC unroll 3
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int i = 0; i < K; ++i) acc[h][i] = _mm256_setzero_ps();
  }
  for (int c = 0; c < hd; c += 8) {
    __m256 kc[K];
#pragma GCC unroll 4
    for (int i = 0; i < K; ++i) kc[i] = _mm256_loadu_ps(k[i] + c);
#pragma GCC unroll 3
    for (int h = 0; h < H; ++h) {
      const __m256 qc = _mm256_loadu_ps(q + static_cast<size_t>(h) * hd + c);
#pragma GCC unroll 4
      for (int i = 0; i < K; ++i) acc[h][i] = _mm256_fmadd_ps(qc, kc[i], acc[h][i]);
    }
  }
  const __m128i keep = _mm_cmpgt_epi32(_mm_set1_epi32(K), _mm_setr_epi32(0, 1, 2, 3));
#pragma GCC unroll 3
  for (int h = 0; h < H; ++h) {
    const __m128 sums = SumFour(acc[h][0], acc[h][K > 1 ? 1 : 0], acc[h][K > 2 ? 2 : 0], acc[h][K > 3 ? 3 : 0]);
    const __m128 scaled = _mm_mul_ps(sums, _mm_set1_ps(scale));
    if constexpr (K == 4) {
      _mm_storeu_ps(out + h * ld, scaled);
    } else {
      _mm_maskstore_ps(out + h * ld, keep, scaled);  // not past the row: the next head's scores follow
    }
  }
}

// Every key's scores for heads [h0, h0 + H): K keys per pass, the rest one at a time.
template <int H, int K>
inline void ScoreAllKeys(const DecodeQuery& query, int h0, size_t ld, float* scores) {
  KeyWalker key(query, query.k_offset);
  const int hd = query.head_dim;
  const float* q = query.q + static_cast<size_t>(h0) * hd;
  float* out = scores + h0 * ld;
  int j = 0;
  for (; j + K <= query.n_keys; j += K) {
    const float* k[K];
    for (const float*& p : k) p = key.Next();
    ScoreKeys<H, K>(q, hd, k, query.scale, out + j, ld);
  }
  for (; j < query.n_keys; ++j) {
    const float* k[1] = {key.Next()};
    ScoreKeys<H, 1>(q, hd, k, query.scale, out + j, ld);
  }
}

// out[h][col, col + 8 W) = inv[h] * the sum over keys j of p[h][j] * value j's same columns.
template <int H, int W>
inline void WeightedValueColumns(const float* p, size_t ld, int n, KeyWalker value, int col, const float* inv,
                                 int hd, float* out) {
  __m256 acc[H][W];
  for (int h = 0; h < H; ++h) {
    for (int u = 0; u < W; ++u) acc[h][u] = _mm256_setzero_ps();
  }
  for (int j = 0; j < n; ++j) {
    const float* v = value.Next() + col;
    __m256 vc[W];
#pragma GCC unroll 4
    for (int u = 0; u < W; ++u) vc[u] = _mm256_loadu_ps(v + 8 * u);
#pragma GCC unroll 3
    for (int h = 0; h < H; ++h) {
      const __m256 ph = _mm256_set1_ps(p[h * ld + j]);
#pragma GCC unroll 4
      for (int u = 0; u < W; ++u) acc[h][u] = _mm256_fmadd_ps(ph, vc[u], acc[h][u]);
    }
  }
  for (int h = 0; h < H; ++h) {
    for (int u = 0; u < W; ++u) {
      _mm256_storeu_ps(out + static_cast<size_t>(h) * hd + col + 8 * u, _mm256_mul_ps(acc[h][u], _mm256_set1_ps(inv[h])));
    }
  }
}

// Columns W chunks at a time, W at most kMaxW: three heads take three chunks (13 registers).
template <int H>
inline void WeightedValues(const float* p, size_t ld, int n, const KeyWalker& value, const float* inv, int hd,
                           float* out) {
  constexpr int kMaxW = H == 3 ? 3 : 4;
  const int chunks = hd / 8;
  for (int c0 = 0; c0 < chunks; c0 += kMaxW) {
    switch (std::min(kMaxW, chunks - c0)) {
      case 1: WeightedValueColumns<H, 1>(p, ld, n, value, 8 * c0, inv, hd, out); break;
      case 2: WeightedValueColumns<H, 2>(p, ld, n, value, 8 * c0, inv, hd, out); break;
      case 3: WeightedValueColumns<H, 3>(p, ld, n, value, 8 * c0, inv, hd, out); break;
      default: WeightedValueColumns<H, kMaxW>(p, ld, n, value, 8 * c0, inv, hd, out); break;
    }
  }
}

// Heads taken together in the scores and the weighted values: three (the best register
// use), except that four go as two and two, and a last one or two alone.
inline int HeadsPerPass(int remaining) { return remaining == 4 ? 2 : std::min(remaining, 3); }

// Transposed keys (DecodeQuery::kt): ScoreKeys' scores bit for bit, eight keys per vector
// and no horizontal sums. ScoreKeys computes, per (head, key), lane l's chain of fused
// multiply-adds from zero over dimensions l, 8 + l, 16 + l, ..., then SumFour's tree
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Here lane l's chain runs for sixteen
// keys (two vectors) of M heads at once over rows l, 8 + l, ... of the transposed keys:
// each broadcast query element serves two vectors of keys and each key vector M heads (5
// loads per 6 multiply-adds with three heads; one vector of keys at a time took 4 per 3,
// and ran 1.35x slower here). The eight lanes' chains wait in `lanes` for the tree, whose
// adds are vertical.
inline __m256 LoadKeys(const float* p) {
  __m256 k = _mm256_loadu_ps(p);
  asm("" : "+x"(k));  // one load per key vector for all heads, not one folded into each
  return k;
}

// C: the head dimension's 8-float chunks when known at compile time (64 and 128,
// unrolled), or 0 to read it from hd. The scaled scores of M heads (q: M x hd) against n
// keys from kt: head h's at out + h * ld_out. The last sixteen may run past n (within the
// scores' row of whole 16-float vectors, and the transposed keys' spare columns): those
// lanes are never read.
template <int M, int C>
inline void TransposedScores(const float* q, int hd, const float* kt, size_t kt_ld, int n, float scale, float* out,
                             size_t ld_out) {
  constexpr int kVectors = 2;
  const int chunks = C > 0 ? C : hd / 8;
  const __m256 vscale = _mm256_set1_ps(scale);
  __m256 lanes[8][M * kVectors];
  for (int j = 0; j < n; j += 8 * kVectors) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      __m256 a[M][kVectors];
#pragma GCC unroll 3
      for (int h = 0; h < M; ++h) a[h][0] = a[h][1] = _mm256_setzero_ps();
#pragma GCC unroll 16
      for (int c = 0; c < chunks; ++c) {
        const float* row = kt + static_cast<size_t>(8 * c + l) * kt_ld + j;
        const __m256 k0 = LoadKeys(row), k1 = LoadKeys(row + 8);
#pragma GCC unroll 3
        for (int h = 0; h < M; ++h) {
          const __m256 b = _mm256_set1_ps(q[h * hd + 8 * c + l]);
          a[h][0] = _mm256_fmadd_ps(b, k0, a[h][0]);
          a[h][1] = _mm256_fmadd_ps(b, k1, a[h][1]);
        }
      }
#pragma GCC unroll 3
      for (int h = 0; h < M; ++h) {
        lanes[l][kVectors * h] = a[h][0];
        lanes[l][kVectors * h + 1] = a[h][1];
      }
    }
#pragma GCC unroll 6
    for (int i = 0; i < M * kVectors; ++i) {
      const __m256 low = _mm256_add_ps(_mm256_add_ps(lanes[0][i], lanes[1][i]), _mm256_add_ps(lanes[2][i], lanes[3][i]));
      const __m256 high = _mm256_add_ps(_mm256_add_ps(lanes[4][i], lanes[5][i]), _mm256_add_ps(lanes[6][i], lanes[7][i]));
      _mm256_storeu_ps(out + (i / kVectors) * ld_out + j + 8 * (i % kVectors),
                       _mm256_mul_ps(_mm256_add_ps(low, high), vscale));
    }
  }
}

template <int M>
void TransposedScoresAnyDim(const float* q, int hd, const float* kt, size_t kt_ld, int n, float scale, float* out,
                            size_t ld_out) {
  switch (hd) {
    case 64: TransposedScores<M, 8>(q, hd, kt, kt_ld, n, scale, out, ld_out); break;
    case 128: TransposedScores<M, 16>(q, hd, kt, kt_ld, n, scale, out, ld_out); break;
    default: TransposedScores<M, 0>(q, hd, kt, kt_ld, n, scale, out, ld_out); break;
  }
}

}  // namespace

void WeightedPartsAvx2(int parts, const float* weights, const float* outs, size_t part_stride, int head_dim,
                       float* out) {
  for (int c = 0; c < head_dim; c += 64) {
    const int w = head_dim - c >= 64 ? 8 : (head_dim - c) / 8;
    __m256 acc[8];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int p = 0; p < parts; ++p) {
      const __m256 weight = _mm256_set1_ps(weights[p]);
      const float* part = outs + static_cast<size_t>(p) * part_stride + c;
      for (int u = 0; u < w; ++u) acc[u] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(part + 8 * u), acc[u]);
    }
    for (int u = 0; u < w; ++u) _mm256_storeu_ps(out + c + 8 * u, acc[u]);
  }
}

void TransposeKeysAvx2(const float* const* blocks, int block_tokens, size_t k_offset, int head_dim, int first_key,
                       int n_keys, float* kt, size_t ld) {
  DecodeQuery where{};
  where.blocks = blocks;
  where.block_tokens = block_tokens;
  where.head_dim = head_dim;
  where.first_key = first_key;
  KeyWalker key(where, k_offset);
  // Eight keys at a time: each 8 x 8 square of (key, dimension) transposed in registers.
  int j = 0;
  for (; j + 8 <= n_keys; j += 8) {
    const float* k[8];
    for (const float*& p : k) p = key.Next();
    for (int d = 0; d < head_dim; d += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(k[i] + d);
      // Pairs of keys interleaved, then fours, then the 128-bit halves swapped.
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float* o = kt + static_cast<size_t>(d) * ld + j;
      _mm256_storeu_ps(o, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(o + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(o + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(o + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(o + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(o + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(o + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(o + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
  }
  for (; j < n_keys; ++j) {
    const float* k = key.Next();
    for (int d = 0; d < head_dim; ++d) kt[static_cast<size_t>(d) * ld + j] = k[d];
  }
}

void AttendDecodeAvx2(const DecodeQuery& query, float* scores, float* out) {
  const int hd = query.head_dim;
  const int n = query.n_keys;
  const KeyWalker value(query, query.v_offset);
  const size_t ld = static_cast<size_t>(n + 15) / 16 * 16;  // scores row stride

  for (int h0 = 0, heads; h0 < query.group; h0 += heads) {
    heads = HeadsPerPass(query.group - h0);
    if (query.kt != nullptr) {
      const float* q = query.q + static_cast<size_t>(h0) * hd;
      float* s = scores + h0 * ld;
      switch (heads) {
        case 1: TransposedScoresAnyDim<1>(q, hd, query.kt, query.kt_ld, n, query.scale, s, ld); break;
        case 2: TransposedScoresAnyDim<2>(q, hd, query.kt, query.kt_ld, n, query.scale, s, ld); break;
        default: TransposedScoresAnyDim<3>(q, hd, query.kt, query.kt_ld, n, query.scale, s, ld); break;
      }
      continue;
    }
    switch (heads) {
      case 1: ScoreAllKeys<1, 4>(query, h0, ld, scores); break;
      case 2: ScoreAllKeys<2, 4>(query, h0, ld, scores); break;
      default: ScoreAllKeys<3, 3>(query, h0, ld, scores); break;
    }
  }
  // Each head's softmax numerators, then the weighted values of the heads of a pass.
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int h0 = 0, heads; h0 < query.group; h0 += heads) {
    heads = HeadsPerPass(query.group - h0);
    float inv[3];
    for (int h = h0; h < h0 + heads; ++h) {
      float* s = scores + h * ld;
      __m256 vmax = _mm256_set1_ps(-INFINITY);
      int j = 0;
      for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
      float max_score = Max8(vmax);
      for (int t = j; t < n; ++t) max_score = s[t] > max_score ? s[t] : max_score;
      const __m256 max = _mm256_set1_ps(max_score);
      __m256 vsum = _mm256_setzero_ps();
      for (j = 0; j + 8 <= n; j += 8) {
        const __m256 e = ExpNonPositive8(_mm256_sub_ps(_mm256_loadu_ps(s + j), max));
        _mm256_storeu_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
      }
      if (j < n) {
        // The tail's lanes past n: loaded as 0 and not stored, their e^x left out of the sum.
        // (Masked moves only here: on Zen 3 a masked store costs several plain ones.)
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j), lane);
        const __m256 e = ExpNonPositive8(_mm256_sub_ps(_mm256_maskload_ps(s + j, m), max));
        _mm256_maskstore_ps(s + j, m, e);
        vsum = _mm256_add_ps(vsum, _mm256_and_ps(e, _mm256_castsi256_ps(m)));
      }
      const float sum = Sum8(vsum);
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
      default: WeightedValues<3>(s, ld, n, value, inv, hd, o); break;
    }
  }
}

}  // namespace hetero::internal
