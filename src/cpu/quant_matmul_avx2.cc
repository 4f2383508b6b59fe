// AVX2 kernel for the quantized matmul on CPUs without AVX-512 VNNI (AVX2-only x86, and
// AVX-512 parts that lack VNNI). Compiled with -mavx2 -mfma; callers check the CPU first.
// Signed-by-unsigned byte products go through vpmaddubsw, whose int16 pair sums cannot
// saturate here: 4-bit weights reach 15 * 127 * 2, and Q8_0 uses |w| with the activation's
// sign moved onto it, at most 128 * 127 * 2 = 32512.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "src/cpu/quant_matmul.h"
#include "src/runtime/fp16.h"

namespace hetero::internal {
namespace {

constexpr int kBlock = 32;

// Eight int32 partial sums of the 32 products of unsigned `w` and signed `a` bytes.
inline __m256i DotBytes(__m256i w_unsigned, __m256i a_signed) {
  const __m256i pairs = _mm256_maddubs_epi16(w_unsigned, a_signed);
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

inline float HorizontalSum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace

void QuantRowsAvx2(const QuantizedWeights& w, int row, const QuantizedActivations& a, float* y, int ldy) {
  constexpr int kRowTile = 4;  // activation rows per pass: each weight block is unpacked once per tile
  const int nb = w.k / kBlock;
  const uint8_t* wrow = w.blocks + static_cast<size_t>(row) * w.row_bytes;
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  const bool q8 = w.type == TensorType::kQ8_0;
  const bool q4_1 = w.type == TensorType::kQ4_1;
  const size_t block_bytes = q8 ? 34 : (q4_1 ? 20 : 18);
  for (int m0 = 0; m0 < a.rows; m0 += kRowTile) {
    const int tile = std::min(kRowTile, a.rows - m0);
    __m256 acc[kRowTile];
    float offset_sum[kRowTile];
    for (int t = 0; t < kRowTile; ++t) {
      acc[t] = _mm256_setzero_ps();
      offset_sum[t] = 0.0f;
    }
    for (int b = 0; b < nb; ++b) {
      const uint8_t* blk = wrow + b * block_bytes;
      const float d = LoadFp16(blk);
      __m256i wv;
      float offset = 0.0f;
      if (q8) {
        wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      } else {
        // Low nibbles are elements 0..15, high nibbles 16..31.
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (q4_1 ? 4 : 2)));
        wv = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low_nibbles);
        offset = q4_1 ? LoadFp16(blk + 2) : -8.0f * d;
      }
      const __m256i w_abs = q8 ? _mm256_sign_epi8(wv, wv) : wv;
      for (int t = 0; t < tile; ++t) {
        const size_t m = static_cast<size_t>(m0 + t);
        const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + m * a.cols + b * kBlock));
        const __m256i dot = DotBytes(w_abs, q8 ? _mm256_sign_epi8(av, wv) : av);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d * a.d[m * nb + b]), acc[t]);
        offset_sum[t] += offset * a.d_sum[m * nb + b];
      }
    }
    for (int t = 0; t < tile; ++t) y[static_cast<size_t>(m0 + t) * ldy + row] = HorizontalSum(acc[t]) + offset_sum[t];
  }
}

}  // namespace hetero::internal
