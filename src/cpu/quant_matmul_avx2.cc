// AVX2 kernels for Q4_0, Q4_1 and Q8_0 on CPUs without AVX-512 VNNI (AVX2-only x86, and
// AVX-512 parts that lack VNNI): one on the packed tiles the AVX-512 kernels read
// (QuantizedWeights::ClassicTileAt), one on the file's blocks for the rows past the last
// group. Compiled with -mavx2 -mfma -mf16c; callers check the CPU first.
// Signed-by-unsigned byte products go through vpmaddubsw, whose int16 pair sums cannot
// saturate here: 4-bit weights reach 15 * 127 * 2, and Q8_0 uses |w| with the activation's
// sign moved onto it, at most 128 * 127 * 2 = 32512.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "src/cpu/quant_matmul.h"
#include "src/cpu/weight_prefetch.h"
#include "src/runtime/fp16.h"

namespace hetero::internal {
namespace {

constexpr int kBlock = 32;

// Eight int32 partial sums of the 32 products of unsigned `w` and signed `a` bytes.
inline __m256i DotBytes(__m256i w_unsigned, __m256i a_signed) {
  const __m256i pairs = _mm256_maddubs_epi16(w_unsigned, a_signed);
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

inline __m256 Halves8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline __m256i Word(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// One block of a group's packed tile for the 8 lanes (rows) of one half: the codes in the
// order of the activation words (wq[t]: weights 4t..4t+3, wq[t + 4]: 16+4t..16+4t+3, for
// Q8_0 all 32 in order, signed), Q8_0's magnitudes, and each lane's scale (and Q4_1's
// minimum). A tile vector's half holds 8 rows' 4-byte runs; with the activation word of the
// same 4 elements broadcast, vpmaddubsw and vpmaddwd give each row's 4 products summed, as
// vpdpbusd does in the AVX-512 kernel. The integer sums are that kernel's (exact); only the
// float steps round apart.
struct ClassicHalf {
  __m256i wq[8];
  __m256i wabs[8];  // Q8_0: |w|, vpmaddubsw's unsigned operand
  __m256 d, minimum;
};

template <TensorType T>
inline void LoadClassicHalf(const uint8_t* group_base, int b, int half, ClassicHalf& w) {
  const QuantizedWeights::ClassicTile at = QuantizedWeights::ClassicTileAt(T, b);
  const uint8_t* quants = group_base + at.quants + 32 * half;
  w.d = Halves8(group_base + at.scales + 16 * half);
  w.minimum = T == TensorType::kQ4_1 ? Halves8(group_base + at.scales + 32 + 16 * half) : _mm256_setzero_ps();
  if constexpr (T == TensorType::kQ8_0) {
    // Stored plus 128: back to signed, and |w|; the activation gets w's sign
    // (AccumulateClassic), so the pair sums stay below 2^15.
    for (int t = 0; t < 8; ++t) {
      w.wq[t] = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(quants + 64 * t)),
                                 _mm256_set1_epi8(static_cast<char>(0x80)));
      w.wabs[t] = _mm256_sign_epi8(w.wq[t], w.wq[t]);
    }
  } else {
    // Run t: low nibbles are elements 4t..4t+3, high nibbles 16+4t..16+4t+3.
    const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
    for (int t = 0; t < 4; ++t) {
      const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(quants + 64 * t));
      w.wq[t] = _mm256_and_si256(packed, low_nibbles);
      w.wq[t + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
    }
  }
}

// acc plus one half's block b for activation row m.
template <TensorType T>
inline __m256 AccumulateClassic(const ClassicHalf& w, const QuantizedActivations& a, size_t m, int b, int nb,
                                __m256 acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* x = a.q.data() + m * a.cols + b * kBlock;
  const size_t blk = m * nb + b;
  __m256i dot;
  if constexpr (T == TensorType::kQ8_0) {
    dot = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) {
      const __m256i pairs = _mm256_maddubs_epi16(w.wabs[t], _mm256_sign_epi8(Word(x + 4 * t), w.wq[t]));
      dot = _mm256_add_epi32(dot, _mm256_madd_epi16(pairs, ones));
    }
  } else {
    // Eight pair sums of codes (< 16) and activations (|x| <= 127) stay below 2^15, so they
    // add as int16 before one vpmaddwd.
    __m256i pairs = _mm256_maddubs_epi16(w.wq[0], Word(x));
    for (int t = 1; t < 4; ++t) pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w.wq[t], Word(x + 4 * t)));
    for (int t = 0; t < 4; ++t) pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w.wq[t + 4], Word(x + 16 + 4 * t)));
    dot = _mm256_madd_epi16(pairs, ones);
    if constexpr (T == TensorType::kQ4_0) dot = _mm256_add_epi32(dot, _mm256_set1_epi32(a.q4_0_offsets[blk]));
  }
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w.d, _mm256_set1_ps(a.d[blk])), acc);
  if constexpr (T == TensorType::kQ4_1) acc = _mm256_fmadd_ps(w.minimum, _mm256_set1_ps(a.d_sum[blk]), acc);
  return acc;
}

// Lanes [8 half, 8 half + 8) of a packed group for every activation row, kMaxRows rows at
// a time so that each block's unpacked weights serve all of them.
template <TensorType T>
void ClassicGroupHalf(const QuantizedWeights& w, int group, int half, const QuantizedActivations& a, float* y,
                      int ldy) {
  constexpr bool kQ8 = T == TensorType::kQ8_0;
  // Rows sharing each unpacking: 8 for the 4-bit formats (faster than 4 or 16 on a Zen 3),
  // 16 for Q8_0, whose sign work per tile vector is dearer (a few % there).
  constexpr int kMaxRows = kQ8 ? 16 : 8;
  const int nb = w.k / kBlock;
  const uint8_t* base = w.packed_bytes() + static_cast<size_t>(group) * QuantizedWeights::ClassicGroupBytes(T, nb);
  for (int m0 = 0; m0 < a.rows; m0 += kMaxRows) {
    const int rows = std::min(kMaxRows, a.rows - m0);
    __m256 acc[kMaxRows];
    for (int r = 0; r < kMaxRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; ++b) {
      // The first pass over the group asks for the pair's unit ahead (weight_prefetch.h);
      // the second half reads the same lines.
      if (half == 0 && m0 == 0 && b % 2 == 0) {
        PrefetchWeights(base + QuantizedWeights::ClassicTileAt(T, b).quants, kQ8 ? 1088 : 640, w.packed_end());
      }
      ClassicHalf tile;
      LoadClassicHalf<T>(base, b, half, tile);
      for (int r = 0; r < rows; ++r) acc[r] = AccumulateClassic<T>(tile, a, m0 + r, b, nb, acc[r]);
    }
    for (int r = 0; r < rows; ++r) {
      _mm256_storeu_ps(y + static_cast<size_t>(m0 + r) * ldy + group * QuantizedWeights::kGroupRows + 8 * half, acc[r]);
    }
  }
}

inline float HorizontalSum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace

void QuantizeRowsAvx2(const float* x, int rows, int cols, int ld, QuantizedActivations& a, int first_row) {
  const int nb = cols / kBlock;
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int m = first_row; m < first_row + rows; ++m) {
    for (int b = 0; b < nb; ++b) {
      const float* src = x + static_cast<size_t>(m - first_row) * ld + b * kBlock;
      __m256 v[4];
      __m256 amax = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(src + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[i]));
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      const float max_abs = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
      const float d = max_abs / 127.0f;
      const __m256 id = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));  // round to nearest even
      // Packs interleave 128-bit lanes: 32-bit to 16-bit gives 0 2 1 3 (by 4s), then to
      // 8-bit 0 2 4 6 1 3 5 7; one permutation of 32-bit words puts them back in order.
      const __m256i words = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i bytes = _mm256_permutevar8x32_epi32(words, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      const size_t base = static_cast<size_t>(m) * cols + b * kBlock;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.q.data() + base), bytes);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.q_biased.data() + base),
                          _mm256_xor_si256(bytes, _mm256_set1_epi8(static_cast<char>(0x80))));
      const __m256i halves = _mm256_add_epi32(q[0], q[1]);
      const __m256i second = _mm256_add_epi32(q[2], q[3]);
      __m128i h0 = _mm_add_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1));
      __m128i h1 = _mm_add_epi32(_mm256_castsi256_si128(second), _mm256_extracti128_si256(second, 1));
      __m128i both = _mm_hadd_epi32(h0, h1);  // h0 pairs, h1 pairs
      both = _mm_hadd_epi32(both, both);
      const int first_half = _mm_cvtsi128_si32(both);
      const int sum = first_half + _mm_extract_epi32(both, 1);
      a.half_sums[base / 16] = first_half;
      a.half_sums[base / 16 + 1] = sum - first_half;
      a.q6_k_half_offsets[base / 16] = -32 * first_half;
      a.q6_k_half_offsets[base / 16 + 1] = -32 * (sum - first_half);
      a.d[static_cast<size_t>(m) * nb + b] = d;
      a.d_sum[static_cast<size_t>(m) * nb + b] = d * static_cast<float>(sum);
      a.q4_0_offsets[static_cast<size_t>(m) * nb + b] = -8 * sum;
      a.q8_0_offsets[static_cast<size_t>(m) * nb + b] = -128 * sum;
    }
  }
}

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

// R (1 or 2) activation rows, a decode step's (two with its remainder's): both halves of
// each block in one pass, the accumulators in registers, with ClassicGroupHalf's steps, so
// a row's outputs do not depend on how many rows share the product.
template <TensorType T, int R>
void ClassicGroupFewRows(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  const int nb = w.k / kBlock;
  const uint8_t* base = w.packed_bytes() + static_cast<size_t>(group) * QuantizedWeights::ClassicGroupBytes(T, nb);
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    if (b % 2 == 0) {
      PrefetchWeights(base + QuantizedWeights::ClassicTileAt(T, b).quants, T == TensorType::kQ8_0 ? 1088 : 640,
                      w.packed_end());
    }
    ClassicHalf tile;
    LoadClassicHalf<T>(base, b, 0, tile);
    for (int r = 0; r < R; ++r) acc0[r] = AccumulateClassic<T>(tile, a, r, b, nb, acc0[r]);
    LoadClassicHalf<T>(base, b, 1, tile);
    for (int r = 0; r < R; ++r) acc1[r] = AccumulateClassic<T>(tile, a, r, b, nb, acc1[r]);
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(y + static_cast<size_t>(r) * ldy + group * QuantizedWeights::kGroupRows, acc0[r]);
    _mm256_storeu_ps(y + static_cast<size_t>(r) * ldy + group * QuantizedWeights::kGroupRows + 8, acc1[r]);
  }
}

template <int R>
void ClassicGroupFewRowsOfType(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  switch (w.type) {
    case TensorType::kQ4_0: ClassicGroupFewRows<TensorType::kQ4_0, R>(w, group, a, y, ldy); break;
    case TensorType::kQ4_1: ClassicGroupFewRows<TensorType::kQ4_1, R>(w, group, a, y, ldy); break;
    default: ClassicGroupFewRows<TensorType::kQ8_0, R>(w, group, a, y, ldy); break;
  }
}

void QuantGroupAvx2(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  if (a.rows <= 2) {
    if (a.rows == 1) {
      ClassicGroupFewRowsOfType<1>(w, group, a, y, ldy);
    } else {
      ClassicGroupFewRowsOfType<2>(w, group, a, y, ldy);
    }
    return;
  }
  for (int half = 0; half < 2; ++half) {
    switch (w.type) {
      case TensorType::kQ4_0: ClassicGroupHalf<TensorType::kQ4_0>(w, group, half, a, y, ldy); break;
      case TensorType::kQ4_1: ClassicGroupHalf<TensorType::kQ4_1>(w, group, half, a, y, ldy); break;
      default: ClassicGroupHalf<TensorType::kQ8_0>(w, group, half, a, y, ldy); break;
    }
  }
}

}  // namespace hetero::internal
