// AVX-512 VNNI kernels of quant_matmul.h. This file alone is compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mf16c -mfma; callers check the CPU first.
#include <immintrin.h>

#include <cstring>

#include "src/cpu/quant_matmul.h"

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

void QuantizeRowsAvx512(const float* x, int rows, int cols, int ld, QuantizedActivations& a) {
  const int nb = cols / kBlock;
  for (int m = 0; m < rows; ++m) {
    for (int b = 0; b < nb; ++b) {
      const float* src = x + static_cast<size_t>(m) * ld + b * kBlock;
      const __m512 v0 = _mm512_loadu_ps(src);
      const __m512 v1 = _mm512_loadu_ps(src + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float d = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));  // round to nearest even
      const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
      const size_t base = static_cast<size_t>(m) * cols + b * kBlock;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + base), _mm512_cvtepi32_epi8(i0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + base + 16), _mm512_cvtepi32_epi8(i1));
      const __m512i bias = _mm512_set1_epi32(128);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q_biased.data() + base),
                       _mm512_cvtepi32_epi8(_mm512_add_epi32(i0, bias)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q_biased.data() + base + 16),
                       _mm512_cvtepi32_epi8(_mm512_add_epi32(i1, bias)));
      const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
      a.d[static_cast<size_t>(m) * nb + b] = d;
      a.d_sum[static_cast<size_t>(m) * nb + b] = d * static_cast<float>(sum);
    }
  }
}

namespace {

// One weight row against R activation rows: each weight block pair is unpacked once and
// meets all R rows while in registers; per row and block pair, one vpdpbusd, a convert, a
// multiply and an add. The weight offsets are a separate short dot product per row. The
// arithmetic of a row does not depend on R, so batching never changes a sequence's logits.
template <int R>
void QuantRowTile(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m0, float* out, int ldo) {
  const int nb = w.k / kBlock;
  const uint8_t* wrow = w.blocks + static_cast<size_t>(row) * w.row_bytes;
  const bool q8 = w.type == TensorType::kQ8_0;
  const bool q41 = w.type == TensorType::kQ4_1;
  const int bytes = q8 ? 34 : (q41 ? 20 : 18);
  const int qs_at = q8 ? 2 : (q41 ? 4 : 2);
  __m512 acc[R];
  const float* d_lanes[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    d_lanes[r] = a.d_lanes.data() + static_cast<size_t>(m0 + r) * nb * 8;
  }
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    const uint8_t* b0 = wrow + b * bytes;
    const uint8_t* b1 = b0 + bytes;
    __m512i wq;
    if (q8) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + qs_at));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + qs_at));
      wq = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
    } else {
      wq = UnpackTwoQ4(b0 + qs_at, b1 + qs_at);
    }
    const __m512 dw = TwoScales(Half(b0), Half(b1));
    for (int r = 0; r < R; ++r) {
      const size_t at = static_cast<size_t>(m0 + r) * a.cols + b * kBlock;
      // Unsigned operand first: Q4 weights are unsigned; Q8_0 pairs signed weights with the
      // activations biased by 128.
      const __m512i dot = q8 ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(a.q_biased.data() + at), wq)
                             : _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, _mm512_loadu_si512(a.q.data() + at));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_loadu_ps(d_lanes[r] + b * 8)), acc[r]);
    }
  }
  if (b < nb) {  // an odd last block
    const uint8_t* b0 = wrow + b * bytes;
    const __m256i wq = q8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + qs_at)) : UnpackOneQ4(b0 + qs_at);
    const float d0 = Half(b0);
    for (int r = 0; r < R; ++r) {
      const size_t at = static_cast<size_t>(m0 + r) * a.cols + b * kBlock;
      const __m256i dot =
          q8 ? _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q_biased.data() + at)), wq)
             : _mm256_dpbusd_epi32(_mm256_setzero_si256(), wq, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + at)));
      const float s = d0 * a.d[static_cast<size_t>(m0 + r) * nb + b];
      acc[r] = _mm512_add_ps(acc[r], _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(s))));
    }
  }
  // Offsets: sum over blocks of offset[b] times the activation block's sum (Q4) or scale (Q8).
  const float* offsets = w.offsets.data() + static_cast<size_t>(row) * nb;
  for (int r = 0; r < R; ++r) {
    const float* act = (q8 ? a.d.data() : a.d_sum.data()) + static_cast<size_t>(m0 + r) * nb;
    __m512 off = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= nb; i += 16) off = _mm512_fmadd_ps(_mm512_loadu_ps(offsets + i), _mm512_loadu_ps(act + i), off);
    if (i < nb) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (nb - i)) - 1);
      off = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, offsets + i), _mm512_maskz_loadu_ps(mask, act + i), off);
    }
    out[static_cast<size_t>(r) * ldo] = _mm512_reduce_add_ps(acc[r]) + _mm512_reduce_add_ps(off);
  }
}

}  // namespace

float QuantDotAvx512(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m) {
  float out;
  QuantRowTile<1>(w, row, a, m, &out, 0);
  return out;
}

void QuantRowsAvx512(const QuantizedWeights& w, int row, const QuantizedActivations& a, float* y, int ldy) {
  int m = 0;
  for (; m + 8 <= a.rows; m += 8) QuantRowTile<8>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy);
  switch (a.rows - m) {
    case 7: QuantRowTile<7>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy); break;
    case 6: QuantRowTile<6>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy); break;
    case 5: QuantRowTile<5>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy); break;
    case 4: QuantRowTile<4>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy); break;
    case 3: QuantRowTile<3>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy); break;
    case 2: QuantRowTile<2>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy); break;
    case 1: QuantRowTile<1>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy); break;
    default: break;
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
