// AVX2 kernels for the block formats on the same packed units as the AVX-512 ones (CPUs
// without AVX-512 VNNI). Compiled with -mavx2 -mfma -mf16c; callers check the CPU first.
// A group's 16 outputs are two halves of 8 lanes (the first and last 32 bytes of each tile
// vector). Byte products go through vpmaddubsw, whose int16 pair sums cannot saturate:
// codes reach 63 (Q6_K), so 2 * 63 * 127 = 16002. The IQ4 formats (levels up to 241) are not
// run here.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "src/cpu/quant_matmul.h"
#include "src/cpu/weight_prefetch.h"

namespace hetero::internal {
namespace {

constexpr int kRows = QuantizedWeights::kGroupRows;

constexpr int Runs(TensorType t) { return t == TensorType::kQ5_0 || t == TensorType::kQ5_1 ? 1 : 8; }
constexpr int HiPlanes(TensorType t) {
  return t == TensorType::kQ6_K ? 2 : (t == TensorType::kQ5_0 || t == TensorType::kQ5_1 || t == TensorType::kQ5_K ? 1 : 0);
}

inline __m256 Halves8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 Bytes8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v)));
}
inline __m256 SignedBytes8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(v)));
}

// 32 mask bits as 32 bytes: `value` where the bit is set, 0 elsewhere.
inline __m256i ExpandBits(uint32_t bits, __m256i value) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select), value);
}

// Eight int32 sums, per lane, of 4 products of unsigned weight bytes and the broadcast word.
inline __m256i Dot4(__m256i w, int32_t x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_set1_epi32(x)), _mm256_set1_epi16(1));
}

// The outputs of lanes [8 half, 8 half + 8) of a group, for one activation row at a time
// (the unpacked run serves every row). Arithmetic per output as in the AVX-512 kernel.
template <TensorType T>
void GroupHalf(const QuantizedWeights& w, int group, int half, const QuantizedActivations& a, float* y, int ldy) {
  constexpr int kRuns = Runs(T);
  constexpr int kHi = HiPlanes(T);
  static const PackedUnitLayout layout = GetPackedUnitLayout(T);
  static const size_t kPrefetchShare = (layout.bytes + kRuns * 64 - 1) / (kRuns * 64) * 64;
  const int units = w.k / (32 * kRuns);
  const int nb = w.k / 32;
  const int lanes = 8 * half;  // first lane of this half
  constexpr int kMaxRows = 8;
  for (int m0 = 0; m0 < a.rows; m0 += kMaxRows) {
    const int rows = std::min(kMaxRows, a.rows - m0);
    __m256 acc[kMaxRows];
    for (int r = 0; r < kMaxRows; ++r) acc[r] = _mm256_setzero_ps();
    const uint8_t* unit = w.packed_bytes() + static_cast<size_t>(group) * units * layout.bytes;
    for (int u = 0; u < units; ++u, unit += layout.bytes) {
      const uint8_t* scales = unit + layout.scales_at;
      __m256 unit_d = _mm256_setzero_ps(), unit_dmin = _mm256_setzero_ps();
      if constexpr (T == TensorType::kQ4_K || T == TensorType::kQ5_K) {
        unit_d = Halves8(scales + 256 + 2 * lanes);
        unit_dmin = Halves8(scales + 288 + 2 * lanes);
      } else if constexpr (T == TensorType::kQ6_K || T == TensorType::kQ3_K) {
        unit_d = Halves8(scales + 256 + 2 * lanes);
      } else if constexpr (T == TensorType::kQ2_K) {
        unit_d = Halves8(scales + 256 + 2 * lanes);
        unit_dmin = Halves8(scales + 288 + 2 * lanes);
      }
      for (int run = 0; run < kRuns; ++run) {
        // The first pass over the group asks for each run's share of the unit ahead, as the
        // AVX-512 kernel does (weight_prefetch.h); the second half reads the same lines.
        if (half == 0 && m0 == 0) PrefetchWeights(unit + run * kPrefetchShare, kPrefetchShare, w.packed_end());
        const uint8_t* tile = unit + 256 * run + 32 * half;
        __m256i wq[8];
        const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
        for (int t = 0; t < 4; ++t) {
          const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(tile + 64 * t));
          wq[t] = _mm256_and_si256(packed, low_nibbles);
          wq[t + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
        }
        if constexpr (kHi == 2) {  // Q6_K's bits 4 and 5, stored as pairs (PackedUnitLayout)
          const uint8_t* pairs = unit + layout.hi_at + static_cast<size_t>(run) * 128 + 32 * half;
          const __m256i bits45 = _mm256_set1_epi8(0x30);
          for (int h = 0; h < 2; ++h) {
            const __m256i p = _mm256_load_si256(reinterpret_cast<const __m256i*>(pairs + 64 * h));
            wq[4 * h] = _mm256_or_si256(wq[4 * h], _mm256_and_si256(_mm256_slli_epi16(p, 4), bits45));
            wq[4 * h + 1] = _mm256_or_si256(wq[4 * h + 1], _mm256_and_si256(_mm256_slli_epi16(p, 2), bits45));
            wq[4 * h + 2] = _mm256_or_si256(wq[4 * h + 2], _mm256_and_si256(p, bits45));
            wq[4 * h + 3] = _mm256_or_si256(wq[4 * h + 3], _mm256_and_si256(_mm256_srli_epi16(p, 2), bits45));
          }
        } else if constexpr (kHi > 0) {  // one plane (the Q5 formats): a mask per tile vector
          static_assert(kHi == 1, "two planes are stored as pairs");
          const uint8_t* masks = unit + layout.hi_at + static_cast<size_t>(run) * 64;
          for (int v = 0; v < 8; ++v) {
            uint32_t bits;
            std::memcpy(&bits, masks + 8 * v + 4 * half, 4);
            wq[v] = _mm256_or_si256(wq[v], ExpandBits(bits, _mm256_set1_epi8(16)));
          }
        }
        __m256 scale, scale_hi = _mm256_setzero_ps(), offset = _mm256_setzero_ps(), offset_hi = _mm256_setzero_ps();
        if constexpr (T == TensorType::kQ5_0) {
          scale = Halves8(scales + 2 * lanes);
          offset = _mm256_mul_ps(scale, _mm256_set1_ps(-16.0f));
        } else if constexpr (T == TensorType::kQ5_1) {
          scale = Halves8(scales + 2 * lanes);
          offset = Halves8(scales + 32 + 2 * lanes);
        } else if constexpr (T == TensorType::kQ4_K || T == TensorType::kQ5_K) {
          scale = _mm256_mul_ps(unit_d, Bytes8(scales + 16 * run + lanes));
          offset = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(unit_dmin, Bytes8(scales + 128 + 16 * run + lanes)));
        } else if constexpr (T == TensorType::kQ2_K) {
          int64_t lo_bytes, hi_bytes;
          std::memcpy(&lo_bytes, scales + 32 * run + lanes, 8);
          std::memcpy(&hi_bytes, scales + 32 * run + 16 + lanes, 8);
          const __m256i lo = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(lo_bytes));
          const __m256i hi = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(hi_bytes));
          const __m256i nibble = _mm256_set1_epi32(0x0F);
          const __m256 neg_dmin = _mm256_sub_ps(_mm256_setzero_ps(), unit_dmin);
          scale = _mm256_mul_ps(unit_d, _mm256_cvtepi32_ps(_mm256_and_si256(lo, nibble)));
          scale_hi = _mm256_mul_ps(unit_d, _mm256_cvtepi32_ps(_mm256_and_si256(hi, nibble)));
          offset = _mm256_mul_ps(neg_dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(lo, 4)));
          offset_hi = _mm256_mul_ps(neg_dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(hi, 4)));
        } else {  // Q6_K, Q3_K
          scale = _mm256_mul_ps(unit_d, SignedBytes8(scales + 32 * run + lanes));
          scale_hi = _mm256_mul_ps(unit_d, SignedBytes8(scales + 32 * run + 16 + lanes));
        }
        const int b = u * kRuns + run;
        for (int r = 0; r < rows; ++r) {
          const int m = m0 + r;
          const uint8_t* x = reinterpret_cast<const uint8_t*>(a.q.data()) + static_cast<size_t>(m) * a.cols + b * 32;
          __m256i dot0 = _mm256_setzero_si256(), dot1 = _mm256_setzero_si256();
          for (int t = 0; t < 4; ++t) {
            int32_t x0, x1;
            std::memcpy(&x0, x + 4 * t, 4);
            std::memcpy(&x1, x + 16 + 4 * t, 4);
            dot0 = _mm256_add_epi32(dot0, Dot4(wq[t], x0));
            dot1 = _mm256_add_epi32(dot1, Dot4(wq[t + 4], x1));
          }
          const float dm = a.d[static_cast<size_t>(m) * nb + b];
          const __m256 da = _mm256_set1_ps(dm);
          const int32_t* hs = a.half_sums.data() + (static_cast<size_t>(m) * nb + b) * 2;
          if constexpr (T == TensorType::kQ6_K || T == TensorType::kQ3_K) {
            constexpr int kBias = T == TensorType::kQ6_K ? 32 : 4;
            dot0 = _mm256_sub_epi32(dot0, _mm256_set1_epi32(kBias * hs[0]));
            dot1 = _mm256_sub_epi32(dot1, _mm256_set1_epi32(kBias * hs[1]));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot0), _mm256_mul_ps(scale, da), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), _mm256_mul_ps(scale_hi, da), acc[r]);
          } else if constexpr (T == TensorType::kQ2_K) {
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot0), _mm256_mul_ps(scale, da), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), _mm256_mul_ps(scale_hi, da), acc[r]);
            acc[r] = _mm256_fmadd_ps(offset, _mm256_set1_ps(dm * static_cast<float>(hs[0])), acc[r]);
            acc[r] = _mm256_fmadd_ps(offset_hi, _mm256_set1_ps(dm * static_cast<float>(hs[1])), acc[r]);
          } else {
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_add_epi32(dot0, dot1));
            acc[r] = _mm256_fmadd_ps(dot, _mm256_mul_ps(scale, da), acc[r]);
            acc[r] = _mm256_fmadd_ps(offset, _mm256_set1_ps(a.d_sum[static_cast<size_t>(m) * nb + b]), acc[r]);
          }
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      _mm256_storeu_ps(y + static_cast<size_t>(m0 + r) * ldy + group * kRows + lanes, acc[r]);
    }
  }
}

template <TensorType T>
void GroupOfType(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  GroupHalf<T>(w, group, 0, a, y, ldy);
  GroupHalf<T>(w, group, 1, a, y, ldy);
}

}  // namespace

bool QuantBlockGroupAvx2Supports(TensorType type) {
  switch (type) {
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void QuantBlockGroupAvx2(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  switch (w.type) {
    case TensorType::kQ5_0: GroupOfType<TensorType::kQ5_0>(w, group, a, y, ldy); break;
    case TensorType::kQ5_1: GroupOfType<TensorType::kQ5_1>(w, group, a, y, ldy); break;
    case TensorType::kQ2_K: GroupOfType<TensorType::kQ2_K>(w, group, a, y, ldy); break;
    case TensorType::kQ3_K: GroupOfType<TensorType::kQ3_K>(w, group, a, y, ldy); break;
    case TensorType::kQ4_K: GroupOfType<TensorType::kQ4_K>(w, group, a, y, ldy); break;
    case TensorType::kQ5_K: GroupOfType<TensorType::kQ5_K>(w, group, a, y, ldy); break;
    case TensorType::kQ6_K: GroupOfType<TensorType::kQ6_K>(w, group, a, y, ldy); break;
    default: break;  // QuantMatmul never calls this for other types
  }
}

}  // namespace hetero::internal
