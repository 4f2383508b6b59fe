// AVX-512 VNNI kernels for the block formats of quant_blocks.h (Q5_0, Q5_1, IQ4_NL, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS), on the packed units QuantizedWeights::Pack builds. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mf16c -mfma; callers check the CPU first.
#include <immintrin.h>

#include <cstring>

#include "src/cpu/quant_matmul.h"
#include "src/cpu/tile_store_avx512.h"
#include "src/cpu/weight_prefetch.h"
#include "src/runtime/dequantize.h"

namespace hetero::internal {
namespace {

constexpr int kRows = QuantizedWeights::kGroupRows;

constexpr int Runs(TensorType t) {
  return t == TensorType::kQ5_0 || t == TensorType::kQ5_1 || t == TensorType::kIQ4_NL ? 1 : 8;
}
constexpr int HiPlanes(TensorType t) {
  return t == TensorType::kQ6_K ? 2 : (t == TensorType::kQ5_0 || t == TensorType::kQ5_1 || t == TensorType::kQ5_K ? 1 : 0);
}
constexpr bool Iq4(TensorType t) { return t == TensorType::kIQ4_NL || t == TensorType::kIQ4_XS; }

inline __m512 Halves(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 Bytes(const uint8_t* p) {  // 16 unsigned bytes as floats
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 SignedBytes(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// 16 outputs against R activation rows. Per run of 32 columns the group's codes are
// rebuilt once into 8 vectors of unsigned bytes (low nibbles, plus 16 under the fifth bit's
// masks, or Q6_K's bits 4 and 5 merged from their pairs, or the IQ4 grid level + 128 by a
// byte shuffle), then every row meets
// them with 8 vpdpbusd on broadcast activation words, as in the Q4 kernel. The scales are
// applied per run (per half for Q6_K) in float; the codes' bias meets the activation sums.
// A row's arithmetic does not depend on R, so batching never changes a sequence's logits.
template <TensorType T, int R>
void BlockGroupTile(const QuantizedWeights& w, int group, const QuantizedActivations& a, int m0, float* y, int ldy) {
  constexpr int kRuns = Runs(T);
  constexpr int kHi = HiPlanes(T);
  static const PackedUnitLayout layout = GetPackedUnitLayout(T);
  static const size_t kPrefetchShare = (layout.bytes + kRuns * 64 - 1) / (kRuns * 64) * 64;
  const int units = w.k / (32 * kRuns);
  const int nb = w.k / 32;
  const uint8_t* unit = w.packed_bytes() + static_cast<size_t>(group) * units * layout.bytes;
  const uint8_t* weights_end = w.packed_end();
  const uint8_t* act[R];
  const float* d[R];
  const float* d_sum[R];
  const int32_t* half_sums[R];
  const int32_t* q6_k_starts[R];
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const size_t at = static_cast<size_t>(m0 + r) * a.cols;
    act[r] = reinterpret_cast<const uint8_t*>(a.q.data()) + at;
    d[r] = a.d.data() + static_cast<size_t>(m0 + r) * nb;
    d_sum[r] = a.d_sum.data() + static_cast<size_t>(m0 + r) * nb;
    half_sums[r] = a.half_sums.data() + static_cast<size_t>(m0 + r) * nb * 2;
    q6_k_starts[r] = a.q6_k_half_offsets.data() + static_cast<size_t>(m0 + r) * nb * 2;
    acc[r] = _mm512_setzero_ps();
  }
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  __m512i grid = _mm512_setzero_si512();
  if constexpr (Iq4(T)) {
    alignas(16) uint8_t levels[16];
    for (int i = 0; i < 16; ++i) levels[i] = static_cast<uint8_t>(kIq4Levels[i] + 128);
    grid = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(levels)));
  }
  for (int u = 0; u < units; ++u, unit += layout.bytes) {
    const uint8_t* scales = unit + layout.scales_at;
    __m512 unit_d = _mm512_setzero_ps(), unit_dmin = _mm512_setzero_ps();
    if constexpr (T == TensorType::kQ4_K || T == TensorType::kQ5_K) {
      unit_d = Halves(scales + 256);
      unit_dmin = Halves(scales + 288);
    } else if constexpr (T == TensorType::kQ6_K || T == TensorType::kQ3_K) {
      unit_d = Halves(scales + 256);
    } else if constexpr (T == TensorType::kQ2_K) {
      unit_d = Halves(scales + 256);
      unit_dmin = Halves(scales + 288);
    } else if constexpr (T == TensorType::kIQ4_XS) {
      unit_d = Halves(scales + 128);
    }
    for (int run = 0; run < kRuns; ++run) {
      // Each run asks for its share of the unit weight_prefetch_bytes on: an even trickle of
      // requests rather than a burst per unit.
      PrefetchWeights(unit + run * kPrefetchShare, kPrefetchShare, weights_end);
      const uint8_t* tile = unit + 256 * run;
      __m512i wq[8];
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m512i packed = _mm512_load_si512(tile + 64 * t);
        wq[t] = _mm512_and_si512(packed, low_nibbles);
        wq[t + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibbles);
      }
      if constexpr (kHi == 2) {  // Q6_K's bits 4 and 5, stored as pairs (PackedUnitLayout)
        const uint8_t* pairs = unit + layout.hi_at + static_cast<size_t>(run) * 128;
        const __m512i bits45 = _mm512_set1_epi8(0x30);
        constexpr int kOr = 0xF8;  // a | (b & c)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m512i p = _mm512_load_si512(pairs + 64 * h);
          wq[4 * h] = _mm512_ternarylogic_epi32(wq[4 * h], _mm512_slli_epi16(p, 4), bits45, kOr);
          wq[4 * h + 1] = _mm512_ternarylogic_epi32(wq[4 * h + 1], _mm512_slli_epi16(p, 2), bits45, kOr);
          wq[4 * h + 2] = _mm512_ternarylogic_epi32(wq[4 * h + 2], p, bits45, kOr);
          wq[4 * h + 3] = _mm512_ternarylogic_epi32(wq[4 * h + 3], _mm512_srli_epi16(p, 2), bits45, kOr);
        }
      } else if constexpr (kHi > 0) {  // one plane (the Q5 formats): a mask per tile vector
        static_assert(kHi == 1, "two planes are stored as pairs");
        const uint8_t* masks = unit + layout.hi_at + static_cast<size_t>(run) * 64;
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
          uint64_t bits;
          std::memcpy(&bits, masks + 8 * v, 8);
          wq[v] = _mm512_mask_add_epi8(wq[v], _cvtu64_mask64(bits), wq[v], _mm512_set1_epi8(16));
        }
      }
      if constexpr (Iq4(T)) {
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) wq[v] = _mm512_shuffle_epi8(grid, wq[v]);
      }
      // Per-output scale (and for Q6_K the second half's) and the offset that multiplies
      // the activation block's d * sum(q).
      __m512 scale, scale_hi = _mm512_setzero_ps(), offset = _mm512_setzero_ps(), offset_hi = _mm512_setzero_ps();
      if constexpr (T == TensorType::kQ5_0) {
        scale = Halves(scales);
        offset = _mm512_mul_ps(scale, _mm512_set1_ps(-16.0f));
      } else if constexpr (T == TensorType::kIQ4_NL) {
        scale = Halves(scales);
        offset = _mm512_mul_ps(scale, _mm512_set1_ps(-128.0f));
      } else if constexpr (T == TensorType::kQ5_1) {
        scale = Halves(scales);
        offset = Halves(scales + 32);
      } else if constexpr (T == TensorType::kQ4_K || T == TensorType::kQ5_K) {
        scale = _mm512_mul_ps(unit_d, Bytes(scales + 16 * run));
        offset = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(unit_dmin, Bytes(scales + 128 + 16 * run)));
      } else if constexpr (T == TensorType::kIQ4_XS) {
        scale = _mm512_mul_ps(unit_d, SignedBytes(scales + 16 * run));
        offset = _mm512_mul_ps(scale, _mm512_set1_ps(-128.0f));
      } else if constexpr (T == TensorType::kQ2_K) {  // a scale and a minimum per 16, 4 bits each
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 32 * run));
        const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 32 * run + 16));
        const __m128i nibble = _mm_set1_epi8(0x0F);
        auto floats = [](__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); };
        scale = _mm512_mul_ps(unit_d, floats(_mm_and_si128(lo, nibble)));
        scale_hi = _mm512_mul_ps(unit_d, floats(_mm_and_si128(hi, nibble)));
        const __m512 neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), unit_dmin);
        offset = _mm512_mul_ps(neg_dmin, floats(_mm_and_si128(_mm_srli_epi16(lo, 4), nibble)));
        offset_hi = _mm512_mul_ps(neg_dmin, floats(_mm_and_si128(_mm_srli_epi16(hi, 4), nibble)));
      } else {  // Q6_K, Q3_K: a signed scale per 16, codes biased by 32 or 4
        scale = _mm512_mul_ps(unit_d, SignedBytes(scales + 32 * run));
        scale_hi = _mm512_mul_ps(unit_d, SignedBytes(scales + 32 * run + 16));
      }
      const int b = u * kRuns + run;
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* x = act[r] + b * 32;
        // Q6_K and Q3_K: the codes' bias times the halves' activation sums starts the dot
        // products, so no subtraction follows them.
        __m512i dot0 = _mm512_setzero_si512(), dot1 = _mm512_setzero_si512();
        if constexpr (T == TensorType::kQ6_K) {  // -32 * the halves' sums, stored ready
          dot0 = _mm512_set1_epi32(q6_k_starts[r][2 * b]);
          dot1 = _mm512_set1_epi32(q6_k_starts[r][2 * b + 1]);
        } else if constexpr (T == TensorType::kQ3_K) {
          dot0 = _mm512_set1_epi32(-4 * half_sums[r][2 * b]);
          dot1 = _mm512_set1_epi32(-4 * half_sums[r][2 * b + 1]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          int32_t x0, x1;
          std::memcpy(&x0, x + 4 * t, 4);
          std::memcpy(&x1, x + 16 + 4 * t, 4);
          dot0 = _mm512_dpbusd_epi32(dot0, wq[t], _mm512_set1_epi32(x0));
          dot1 = _mm512_dpbusd_epi32(dot1, wq[t + 4], _mm512_set1_epi32(x1));
        }
        const __m512 da = _mm512_set1_ps(d[r][b]);
        if constexpr (T == TensorType::kQ6_K || T == TensorType::kQ3_K) {
          // The halves' scales first, the activation block's scale once.
          const __m512 halves =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot0), scale, _mm512_mul_ps(_mm512_cvtepi32_ps(dot1), scale_hi));
          acc[r] = _mm512_fmadd_ps(halves, da, acc[r]);
        } else if constexpr (T == TensorType::kQ2_K) {
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot0), _mm512_mul_ps(scale, da), acc[r]);
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot1), _mm512_mul_ps(scale_hi, da), acc[r]);
          acc[r] = _mm512_fmadd_ps(offset, _mm512_set1_ps(d[r][b] * static_cast<float>(half_sums[r][2 * b])), acc[r]);
          acc[r] = _mm512_fmadd_ps(offset_hi, _mm512_set1_ps(d[r][b] * static_cast<float>(half_sums[r][2 * b + 1])),
                                   acc[r]);
        } else {
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(dot0, dot1));
          acc[r] = _mm512_fmadd_ps(dot, _mm512_mul_ps(scale, da), acc[r]);
          acc[r] = _mm512_fmadd_ps(offset, _mm512_set1_ps(d_sum[r][b]), acc[r]);
        }
      }
    }
  }
  StoreTileRows<R>(acc, a, m0, y, ldy, group * kRows);
}

template <TensorType T>
void BlockGroupOfType(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  int m = 0;
  for (; m + 8 <= a.rows; m += 8) BlockGroupTile<T, 8>(w, group, a, m, y, ldy);
  switch (a.rows - m) {
    case 7: BlockGroupTile<T, 7>(w, group, a, m, y, ldy); break;
    case 6: BlockGroupTile<T, 6>(w, group, a, m, y, ldy); break;
    case 5: BlockGroupTile<T, 5>(w, group, a, m, y, ldy); break;
    case 4: BlockGroupTile<T, 4>(w, group, a, m, y, ldy); break;
    case 3: BlockGroupTile<T, 3>(w, group, a, m, y, ldy); break;
    case 2: BlockGroupTile<T, 2>(w, group, a, m, y, ldy); break;
    case 1: BlockGroupTile<T, 1>(w, group, a, m, y, ldy); break;
    default: break;
  }
}

}  // namespace

void QuantBlockGroupAvx512(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  switch (w.type) {
    case TensorType::kQ5_0: BlockGroupOfType<TensorType::kQ5_0>(w, group, a, y, ldy); break;
    case TensorType::kQ5_1: BlockGroupOfType<TensorType::kQ5_1>(w, group, a, y, ldy); break;
    case TensorType::kIQ4_NL: BlockGroupOfType<TensorType::kIQ4_NL>(w, group, a, y, ldy); break;
    case TensorType::kQ4_K: BlockGroupOfType<TensorType::kQ4_K>(w, group, a, y, ldy); break;
    case TensorType::kQ5_K: BlockGroupOfType<TensorType::kQ5_K>(w, group, a, y, ldy); break;
    case TensorType::kQ6_K: BlockGroupOfType<TensorType::kQ6_K>(w, group, a, y, ldy); break;
    case TensorType::kIQ4_XS: BlockGroupOfType<TensorType::kIQ4_XS>(w, group, a, y, ldy); break;
    case TensorType::kQ3_K: BlockGroupOfType<TensorType::kQ3_K>(w, group, a, y, ldy); break;
    case TensorType::kQ2_K: BlockGroupOfType<TensorType::kQ2_K>(w, group, a, y, ldy); break;
    default: break;  // not packed: QuantMatmul never calls this
  }
}

}  // namespace hetero::internal
