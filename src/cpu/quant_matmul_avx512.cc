// AVX-512 VNNI kernels of quant_matmul.h. This file alone is compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mf16c -mfma; callers check the CPU first.
#include <immintrin.h>

#include <cstring>

#include "src/cpu/quant_matmul.h"
#include "src/cpu/tile_store_avx512.h"
#include "src/cpu/weight_prefetch.h"

namespace hetero::internal {
namespace {

constexpr int kBlock = 32;

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 64 unsigned 4-bit values of two Q4 blocks, in element order: [lo0, hi0, lo1, hi1].
inline __m512i UnpackTwoQ4(const uint8_t* qs0, const uint8_t* qs1) {
  const __m128i n0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0));
  const __m128i n1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1));
  __m512i x = _mm512_castsi128_si512(n0);
  x = _mm512_inserti32x4(x, n0, 1);
  x = _mm512_inserti32x4(x, n1, 2);
  x = _mm512_inserti32x4(x, n1, 3);
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const __m512i lo = _mm512_and_si512(x, mask);
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), mask);
  return _mm512_mask_blend_epi64(0xCC, lo, hi);  // 128-bit lanes 1 and 3 from the high nibbles
}

inline __m256i UnpackOneQ4(const uint8_t* qs) {
  const __m128i n = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(n, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(n, 4), mask);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

inline __m512 TwoScales(float s0, float s1) {
  // AVX-512F only (insertf32x8 would need DQ).
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(s0)), _mm256_castps_pd(_mm256_set1_ps(s1)), 1));
}

}  // namespace

namespace {

// One block of 32 values (v0, v1) of row m into `a`'s int8 blocks and every term the
// kernels read (d_lanes included), rounding as QuantizeRowsPortable does; returns d, and
// the rounded values in i0, i1.
inline float QuantizeBlock(__m512 v0, __m512 v1, QuantizedActivations& a, int m, int b, __m512i& i0, __m512i& i1) {
  const int cols = a.cols, nb = cols / kBlock;
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / 127.0f;
  const __m512 id = _mm512_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
  i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));  // round to nearest even
  i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
  const size_t base = static_cast<size_t>(m) * cols + b * kBlock;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + base), _mm512_cvtepi32_epi8(i0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + base + 16), _mm512_cvtepi32_epi8(i1));
  const __m512i bias = _mm512_set1_epi32(128);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q_biased.data() + base),
                   _mm512_cvtepi32_epi8(_mm512_add_epi32(i0, bias)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q_biased.data() + base + 16),
                   _mm512_cvtepi32_epi8(_mm512_add_epi32(i1, bias)));
  const int first_half = _mm512_reduce_add_epi32(i0);
  const int sum = first_half + _mm512_reduce_add_epi32(i1);
  a.half_sums[base / 16] = first_half;
  a.half_sums[base / 16 + 1] = sum - first_half;
  a.q6_k_half_offsets[base / 16] = -32 * first_half;
  a.q6_k_half_offsets[base / 16 + 1] = -32 * (sum - first_half);
  const size_t block = static_cast<size_t>(m) * nb + b;
  a.d[block] = d;
  a.d_sum[block] = d * static_cast<float>(sum);
  a.q4_0_offsets[block] = -8 * sum;
  a.q8_0_offsets[block] = -128 * sum;
  _mm256_storeu_ps(a.d_lanes.data() + block * 8, _mm256_set1_ps(d));
  return d;
}

}  // namespace

void QuantizeRowsAvx512(const float* x, int rows, int cols, int ld, QuantizedActivations& a, int first_row) {
  const int nb = cols / kBlock;
  __m512i i0, i1;
  for (int m = first_row; m < first_row + rows; ++m) {
    for (int b = 0; b < nb; ++b) {
      const float* src = x + static_cast<size_t>(m - first_row) * ld + b * kBlock;
      QuantizeBlock(_mm512_loadu_ps(src), _mm512_loadu_ps(src + 16), a, m, b, i0, i1);
    }
  }
}

void QuantizeRowWithRemainderAvx512(const float* x, QuantizedActivations& a, int m) {
  const int nb = a.cols / kBlock;
  __m512i i0, i1, unused0, unused1;
  for (int b = 0; b < nb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * kBlock);
    const __m512 v1 = _mm512_loadu_ps(x + b * kBlock + 16);
    const __m512 d = _mm512_set1_ps(QuantizeBlock(v0, v1, a, 2 * m, b, i0, i1));
    // x - d q with the product rounded before the subtraction, as the portable remainder is
    // (the _round_ forms are never fused into a multiply-add).
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 r0 = _mm512_sub_round_ps(v0, _mm512_mul_round_ps(d, _mm512_cvtepi32_ps(i0), kNearest), kNearest);
    const __m512 r1 = _mm512_sub_round_ps(v1, _mm512_mul_round_ps(d, _mm512_cvtepi32_ps(i1), kNearest), kNearest);
    QuantizeBlock(r0, r1, a, 2 * m + 1, b, unused0, unused1);
  }
}

namespace {

// One weight row against R activation rows: each weight block pair is unpacked once and
// meets all R rows while in registers; per row and block pair, one vpdpbusd, a convert, a
// multiply and an add. The weight offsets are a short dot product per row, added before the
// one horizontal sum. The arithmetic of a row does not depend on R, so batching never
// changes a sequence's logits.
template <TensorType T, int R>
void QuantRowTile(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m0, float* out, int ldo) {
  constexpr bool q8 = T == TensorType::kQ8_0;
  constexpr int bytes = q8 ? 34 : (T == TensorType::kQ4_1 ? 20 : 18);
  constexpr int qs_at = T == TensorType::kQ4_1 ? 4 : 2;
  const int nb = w.k / kBlock;
  const uint8_t* wrow = w.blocks + static_cast<size_t>(row) * w.row_bytes;
  __m512 acc[R];
  const uint8_t* act[R];  // the unsigned (Q8_0: biased) or signed activations, as bytes
  const float* d_lanes[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    const size_t at = static_cast<size_t>(m0 + r) * a.cols;
    act[r] = q8 ? a.q_biased.data() + at : reinterpret_cast<const uint8_t*>(a.q.data()) + at;
    d_lanes[r] = a.d_lanes.data() + static_cast<size_t>(m0 + r) * nb * 8;
  }
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    const uint8_t* b0 = wrow + b * bytes;
    const uint8_t* b1 = b0 + bytes;
    __m512i wq;
    if constexpr (q8) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + qs_at));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + qs_at));
      wq = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
    } else {
      wq = UnpackTwoQ4(b0 + qs_at, b1 + qs_at);
    }
    const __m512 dw = TwoScales(Half(b0), Half(b1));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i x = _mm512_loadu_si512(act[r] + b * kBlock);
      // Unsigned operand first: Q4 weights are unsigned; Q8_0 pairs signed weights with the
      // activations biased by 128.
      const __m512i dot = q8 ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, wq)
                             : _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, x);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_loadu_ps(d_lanes[r] + b * 8)), acc[r]);
    }
  }
  if (b < nb) {  // an odd last block
    const uint8_t* b0 = wrow + b * bytes;
    __m256i wq;
    if constexpr (q8) {
      wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + qs_at));
    } else {
      wq = UnpackOneQ4(b0 + qs_at);
    }
    const float d0 = Half(b0);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[r] + b * kBlock));
      const __m256i dot = q8 ? _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, wq)
                             : _mm256_dpbusd_epi32(_mm256_setzero_si256(), wq, x);
      const float s = d0 * a.d[static_cast<size_t>(m0 + r) * nb + b];
      acc[r] = _mm512_add_ps(acc[r], _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(s))));
    }
  }
  // Offsets: sum over blocks of offset[b] times the activation block's sum (Q4) or scale (Q8).
  const float* offsets = w.offsets.data() + static_cast<size_t>(row - w.packed_rows) * nb;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float* s = (q8 ? a.d.data() : a.d_sum.data()) + static_cast<size_t>(m0 + r) * nb;
    __m512 off = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= nb; i += 16) off = _mm512_fmadd_ps(_mm512_loadu_ps(offsets + i), _mm512_loadu_ps(s + i), off);
    if (i < nb) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (nb - i)) - 1);
      off = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, offsets + i), _mm512_maskz_loadu_ps(mask, s + i), off);
    }
    out[static_cast<size_t>(r) * ldo] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], off));
  }
}

template <TensorType T>
void QuantRowsOfType(const QuantizedWeights& w, int row, const QuantizedActivations& a, float* y, int ldy) {
  int m = 0;
  float* out = y + row;
  for (; m + 8 <= a.rows; m += 8) QuantRowTile<T, 8>(w, row, a, m, out + static_cast<size_t>(m) * ldy, ldy);
  out += static_cast<size_t>(m) * ldy;
  switch (a.rows - m) {
    case 7: QuantRowTile<T, 7>(w, row, a, m, out, ldy); break;
    case 6: QuantRowTile<T, 6>(w, row, a, m, out, ldy); break;
    case 5: QuantRowTile<T, 5>(w, row, a, m, out, ldy); break;
    case 4: QuantRowTile<T, 4>(w, row, a, m, out, ldy); break;
    case 3: QuantRowTile<T, 3>(w, row, a, m, out, ldy); break;
    case 2: QuantRowTile<T, 2>(w, row, a, m, out, ldy); break;
    case 1: QuantRowTile<T, 1>(w, row, a, m, out, ldy); break;
    default: break;
  }
}

}  // namespace

void QuantRowsAvx512(const QuantizedWeights& w, int row, const QuantizedActivations& a, float* y, int ldy) {
  switch (w.type) {
    case TensorType::kQ8_0: QuantRowsOfType<TensorType::kQ8_0>(w, row, a, y, ldy); break;
    case TensorType::kQ4_1: QuantRowsOfType<TensorType::kQ4_1>(w, row, a, y, ldy); break;
    default: QuantRowsOfType<TensorType::kQ4_0>(w, row, a, y, ldy); break;
  }
}

namespace {

// 16 outputs (one packed group) against R activation rows. Per block: the group's quants
// are unpacked once (Q4: 4 loads, 8 masks/shifts; Q8_0: 8 loads of weights stored plus 128)
// into 8 vectors; per row, 8 vpdpbusd with the row's signed activation words broadcast give
// 16 exact int32 block dots (for Q4_0 and Q8_0 started at the zero point's or the bias's
// -8 or -128 times the activation block's sum), then one convert and one fused multiply-add
// apply the scales (Q4_1: a second adds its minima times the activation block's sum). A
// row's arithmetic does not depend on R (integer sums are exact, the float steps run block
// by block), so batching never changes a sequence's logits.
template <TensorType T, int R>
void GroupTile(const QuantizedWeights& w, int group, const QuantizedActivations& a, int m0, float* y, int ldy) {
  constexpr bool q8 = T == TensorType::kQ8_0;
  const int nb = w.k / kBlock;
  const uint8_t* group_bytes = w.packed_bytes() + static_cast<size_t>(group) * QuantizedWeights::ClassicGroupBytes(T, nb);
  const uint8_t* weights_end = w.packed_end();
  // Q4_0 and Q8_0: the zero point (8) or the stored weights' bias (128) enters the integer
  // dot product, which starts at -8 or -128 sum(x) (exact: |dot| < 2^24 either way), so a
  // block costs one float multiply-add per row instead of two. Q4_1's minima stay in float.
  constexpr bool integer_offset = T != TensorType::kQ4_1;
  const uint8_t* act[R];
  const float* d[R];
  const float* d_sum[R];
  const int32_t* start[R];
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    act[r] = reinterpret_cast<const uint8_t*>(a.q.data()) + static_cast<size_t>(m0 + r) * a.cols;
    d[r] = a.d.data() + static_cast<size_t>(m0 + r) * nb;
    d_sum[r] = a.d_sum.data() + static_cast<size_t>(m0 + r) * nb;
    start[r] = (q8 ? a.q8_0_offsets : a.q4_0_offsets).data() + static_cast<size_t>(m0 + r) * nb;
    acc[r] = _mm512_setzero_ps();
  }
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < nb; ++b) {
    const QuantizedWeights::ClassicTile at = QuantizedWeights::ClassicTileAt(T, b);
    const uint8_t* tile = group_bytes + at.quants;
    if (b % 2 == 0) PrefetchWeights(tile, q8 ? 1088 : 640, weights_end);  // the pair's unit
    __m512i wq[8];
    if constexpr (q8) {
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) wq[t] = _mm512_load_si512(tile + 64 * t);
    } else {
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m512i packed = _mm512_load_si512(tile + 64 * t);
        wq[t] = _mm512_and_si512(packed, low_nibbles);                          // elements 4t..4t+3
        wq[t + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibbles);  // 16+4t..16+4t+3
      }
    }
    const uint8_t* scales = group_bytes + at.scales;
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales)));
    __m512 offset = _mm512_setzero_ps();  // Q4_1: multiplies the activation block's d * sum(q)
    if constexpr (T == TensorType::kQ4_1) {
      offset = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales + 32)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* x = act[r] + b * kBlock;
      // Two independent chains shorten the dependency for small R; integer sums are exact.
      __m512i dot0 = integer_offset ? _mm512_set1_epi32(start[r][b]) : _mm512_setzero_si512();
      __m512i dot1 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        int32_t x0, x1;
        std::memcpy(&x0, x + 4 * t, 4);
        std::memcpy(&x1, x + 16 + 4 * t, 4);
        // wq[t] holds elements 4t..4t+3 of the 16 rows, wq[t + 4] elements 16+4t..16+4t+3.
        dot0 = _mm512_dpbusd_epi32(dot0, wq[t], _mm512_set1_epi32(x0));
        dot1 = _mm512_dpbusd_epi32(dot1, wq[t + 4], _mm512_set1_epi32(x1));
      }
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(dot0, dot1));
      acc[r] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dw, _mm512_set1_ps(d[r][b])), acc[r]);
      if constexpr (!integer_offset) acc[r] = _mm512_fmadd_ps(offset, _mm512_set1_ps(d_sum[r][b]), acc[r]);
    }
  }
  StoreTileRows<R>(acc, a, m0, y, ldy, group * QuantizedWeights::kGroupRows);
}

template <TensorType T>
void GroupOfType(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  int m = 0;
  for (; m + 8 <= a.rows; m += 8) GroupTile<T, 8>(w, group, a, m, y, ldy);
  switch (a.rows - m) {
    case 7: GroupTile<T, 7>(w, group, a, m, y, ldy); break;
    case 6: GroupTile<T, 6>(w, group, a, m, y, ldy); break;
    case 5: GroupTile<T, 5>(w, group, a, m, y, ldy); break;
    case 4: GroupTile<T, 4>(w, group, a, m, y, ldy); break;
    case 3: GroupTile<T, 3>(w, group, a, m, y, ldy); break;
    case 2: GroupTile<T, 2>(w, group, a, m, y, ldy); break;
    case 1: GroupTile<T, 1>(w, group, a, m, y, ldy); break;
    default: break;
  }
}

}  // namespace

void QuantGroupAvx512(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  switch (w.type) {
    case TensorType::kQ8_0: GroupOfType<TensorType::kQ8_0>(w, group, a, y, ldy); break;
    case TensorType::kQ4_1: GroupOfType<TensorType::kQ4_1>(w, group, a, y, ldy); break;
    default: GroupOfType<TensorType::kQ4_0>(w, group, a, y, ldy); break;
  }
}

void DequantizeRowsToBf16Avx512(const QuantizedWeights& w, int row_begin, int row_end, uint16_t* out) {
  const int nb = w.k / kBlock;
  const __m512i mask = _mm512_set1_epi32(0x0F);
  for (int j = row_begin; j < row_end; ++j) {
    const uint8_t* row = w.blocks + static_cast<size_t>(j) * w.row_bytes;
    uint16_t* o = out + static_cast<size_t>(j - row_begin) * w.k;
    for (int b = 0; b < nb; ++b) {
      __m512 lo, hi;
      switch (w.type) {
        case TensorType::kQ4_0:
        case TensorType::kQ4_1: {
          const bool q41 = w.type == TensorType::kQ4_1;
          const uint8_t* blk = row + b * (q41 ? 20 : 18);
          const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (q41 ? 4 : 2))));
          const __m512 d = _mm512_set1_ps(Half(blk));
          const __m512 m = _mm512_set1_ps(q41 ? Half(blk + 2) : -8.0f * Half(blk));
          lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, mask)), d, m);
          hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), d, m);
          break;
        }
        default: {  // Q8_0
          const uint8_t* blk = row + b * 34;
          const __m512 d = _mm512_set1_ps(Half(blk));
          const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
          const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18));
          lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d);
          hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d);
          break;
        }
      }
      _mm512_storeu_si512(o + b * kBlock, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

}  // namespace hetero::internal
