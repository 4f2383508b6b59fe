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

float QuantDotAvx512(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m) {
  return QuantDotAvx512Blocks(w, row, a, m, 0, w.k / kBlock);
}

float QuantDotAvx512Blocks(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m, int first_block,
                           int nb) {
  const uint8_t* wrow = w.blocks + static_cast<size_t>(row) * w.row_bytes;
  const int row_blocks = w.k / kBlock;
  const float* ad = a.d.data() + static_cast<size_t>(m) * row_blocks;
  const float* ads = a.d_sum.data() + static_cast<size_t>(m) * row_blocks;
  __m512 acc = _mm512_setzero_ps();
  float offset = 0.0f;  // weight offsets (Q4_0's -8, Q4_1's minimum) times block sums
  int b = first_block;
  switch (w.type) {
    case TensorType::kQ4_0:
    case TensorType::kQ4_1: {
      const bool q41 = w.type == TensorType::kQ4_1;
      const int bytes = q41 ? 20 : 18;
      const int qs_at = q41 ? 4 : 2;
      const int8_t* aq = a.q.data() + static_cast<size_t>(m) * a.cols;
      for (; b + 1 < nb; b += 2) {
        const uint8_t* b0 = wrow + b * bytes;
        const uint8_t* b1 = b0 + bytes;
        const __m512i wq = UnpackTwoQ4(b0 + qs_at, b1 + qs_at);
        const __m512i aqv = _mm512_loadu_si512(aq + b * kBlock);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, aqv);
        const float d0 = Half(b0), d1 = Half(b1);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), TwoScales(d0 * ad[b], d1 * ad[b + 1]), acc);
        offset += q41 ? Half(b0 + 2) * ads[b] + Half(b1 + 2) * ads[b + 1] : -8.0f * (d0 * ads[b] + d1 * ads[b + 1]);
      }
      if (b < nb) {
        const uint8_t* b0 = wrow + b * bytes;
        const __m256i wq = UnpackOneQ4(b0 + qs_at);
        const __m256i aqv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + b * kBlock));
        const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wq, aqv);
        const float d0 = Half(b0);
        acc = _mm512_add_ps(acc, _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d0 * ad[b]))));
        offset += q41 ? Half(b0 + 2) * ads[b] : -8.0f * d0 * ads[b];
      }
      break;
    }
    case TensorType::kQ8_0: {
      const uint8_t* au = a.q_biased.data() + static_cast<size_t>(m) * a.cols;
      const float* sums = w.block_sums_128.data() + static_cast<size_t>(row) * row_blocks;
      for (; b + 1 < nb; b += 2) {
        const uint8_t* b0 = wrow + b * 34;
        const uint8_t* b1 = b0 + 34;
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2));
        const __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
        const __m512i aqv = _mm512_loadu_si512(au + b * kBlock);
        // sum((q_a + 128) * q_w) = sum(q_a * q_w) + 128 * sum(q_w)
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aqv, wq);
        const float s0 = Half(b0) * ad[b], s1 = Half(b1) * ad[b + 1];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), TwoScales(s0, s1), acc);
        offset -= s0 * sums[b] + s1 * sums[b + 1];
      }
      if (b < nb) {
        const uint8_t* b0 = wrow + b * 34;
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
        const __m256i aqv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(au + b * kBlock));
        const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aqv, w0);
        const float s0 = Half(b0) * ad[b];
        acc = _mm512_add_ps(acc, _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(s0))));
        offset -= s0 * sums[b];
      }
      break;
    }
    default:
      break;
  }
  return _mm512_reduce_add_ps(acc) + offset;
}

namespace {

// One weight row against R activation rows: each weight block pair is unpacked once and
// meets all R rows while in registers (decode batches several sequences this way).
template <int R>
void QuantRowTile(const QuantizedWeights& w, int row, const QuantizedActivations& a, int m0, float* out, int ldo) {
  const int nb = w.k / kBlock;
  const uint8_t* wrow = w.blocks + static_cast<size_t>(row) * w.row_bytes;
  __m512 acc[R];
  float offset[R];
  const float* ad[R];
  const float* ads[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    offset[r] = 0.0f;
    ad[r] = a.d.data() + static_cast<size_t>(m0 + r) * nb;
    ads[r] = a.d_sum.data() + static_cast<size_t>(m0 + r) * nb;
  }
  int b = 0;
  if (w.type == TensorType::kQ8_0) {
    const float* sums = w.block_sums_128.data() + static_cast<size_t>(row) * nb;
    for (; b + 1 < nb; b += 2) {
      const uint8_t* b0 = wrow + b * 34;
      const uint8_t* b1 = b0 + 34;
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2));
      const __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
      const float d0 = Half(b0), d1 = Half(b1);
      for (int r = 0; r < R; ++r) {
        const uint8_t* au = a.q_biased.data() + static_cast<size_t>(m0 + r) * a.cols + b * kBlock;
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(au), wq);
        const float s0 = d0 * ad[r][b], s1 = d1 * ad[r][b + 1];
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), TwoScales(s0, s1), acc[r]);
        offset[r] -= s0 * sums[b] + s1 * sums[b + 1];
      }
    }
  } else {
    const bool q41 = w.type == TensorType::kQ4_1;
    const int bytes = q41 ? 20 : 18;
    const int qs_at = q41 ? 4 : 2;
    for (; b + 1 < nb; b += 2) {
      const uint8_t* b0 = wrow + b * bytes;
      const uint8_t* b1 = b0 + bytes;
      const __m512i wq = UnpackTwoQ4(b0 + qs_at, b1 + qs_at);
      const float d0 = Half(b0), d1 = Half(b1);
      const float m0v = q41 ? Half(b0 + 2) : -8.0f * d0;
      const float m1v = q41 ? Half(b1 + 2) : -8.0f * d1;
      for (int r = 0; r < R; ++r) {
        const int8_t* aq = a.q.data() + static_cast<size_t>(m0 + r) * a.cols + b * kBlock;
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, _mm512_loadu_si512(aq));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), TwoScales(d0 * ad[r][b], d1 * ad[r][b + 1]), acc[r]);
        offset[r] += m0v * ads[r][b] + m1v * ads[r][b + 1];
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float tail = 0.0f;
    if (b < nb) tail = QuantDotAvx512Blocks(w, row, a, m0 + r, b, nb);
    out[static_cast<size_t>(r) * ldo] = _mm512_reduce_add_ps(acc[r]) + offset[r] + tail;
  }
}

}  // namespace

void QuantRowsAvx512(const QuantizedWeights& w, int row, const QuantizedActivations& a, float* y, int ldy) {
  int m = 0;
  for (; m + 4 <= a.rows; m += 4) QuantRowTile<4>(w, row, a, m, y + static_cast<size_t>(m) * ldy + row, ldy);
  switch (a.rows - m) {
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
