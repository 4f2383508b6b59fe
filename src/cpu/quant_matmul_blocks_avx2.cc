// AVX2 kernels for the block formats on the same packed units as the AVX-512 ones (CPUs
// without AVX-512 VNNI). Compiled with -mavx2 -mfma -mf16c; callers check the CPU first.
// A group's 16 outputs are two halves of 8 lanes (the first and last 32 bytes of each tile
// vector). Byte products go through vpmaddubsw, whose int16 pair sums cannot saturate:
// codes reach 63 (Q6_K), so 2 * 63 * 127 = 16002; several of them add as int16 before one
// vpmaddwd widens them (Int16Terms). The IQ4 formats (levels up to 241) are not run here.
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

// The packed unit of format T (PackedUnitLayout), and the share of it each run asks to be
// prefetched ahead (as the AVX-512 kernel does, weight_prefetch.h).
template <TensorType T>
const PackedUnitLayout& Layout() {
  static const PackedUnitLayout layout = GetPackedUnitLayout(T);
  return layout;
}
template <TensorType T>
size_t PrefetchShare() {
  static const size_t share = (Layout<T>().bytes + Runs(T) * 64 - 1) / (Runs(T) * 64) * 64;
  return share;
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

// The 32 mask bits at bytes [first, first + 4) of each 128-bit lane of `bytes` (both lanes
// alike) as 32 bytes: `value` where bit i is set, 0 elsewhere.
inline __m256i ExpandMaskBytes(__m256i bytes, int first, __m256i value) {
  const __m256i spread = _mm256_shuffle_epi8(
      bytes, _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                              3, 3, 3, 3, 3, 3, 3),
                             _mm256_set1_epi8(static_cast<char>(first))));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select), value);
}

// The largest code a format stores (unsigned, before its bias).
constexpr int MaxCode(TensorType t) {
  switch (t) {
    case TensorType::kQ2_K: return 3;
    case TensorType::kQ3_K: return 7;
    case TensorType::kQ4_K: return 15;
    case TensorType::kQ6_K: return 63;
    default: return 31;  // Q5_0, Q5_1, Q5_K
  }
}
// Formats with a scale per 16 weights: the two halves of a run are summed apart.
constexpr bool SplitRuns(TensorType t) {
  return t == TensorType::kQ6_K || t == TensorType::kQ3_K || t == TensorType::kQ2_K;
}
// How many vpmaddubsw results (each at most 2 * MaxCode * 127, as |activation| <= 127) add
// as int16 without overflow before one vpmaddwd widens them: 8 for 4-bit codes, 4 for
// 5-bit, 2 for Q6_K. Integer sums are exact in any grouping, so this changes no result.
constexpr int Int16Terms(TensorType t) { return std::min(8, 32767 / (2 * MaxCode(t) * 127)); }

// The int32 sum, per lane, of products[0..kCount), added as int16 in chunks of kChunk.
template <int kCount, int kChunk>
inline __m256i WidenedSum(const __m256i* products) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i total = _mm256_setzero_si256();
  for (int c = 0; c < kCount; c += kChunk) {
    __m256i chunk = products[c];
    for (int i = 1; i < kChunk && c + i < kCount; ++i) chunk = _mm256_add_epi16(chunk, products[c + i]);
    total = _mm256_add_epi32(total, _mm256_madd_epi16(chunk, ones));
  }
  return total;
}

// A unit's fp16 scales for the 8 lanes of one half.
struct UnitScales {
  __m256 d = _mm256_setzero_ps(), dmin = _mm256_setzero_ps();
};

template <TensorType T>
inline UnitScales LoadUnitScales(const uint8_t* scales, int lanes) {
  UnitScales s;
  if constexpr (T == TensorType::kQ4_K || T == TensorType::kQ5_K || T == TensorType::kQ2_K) {
    s.d = Halves8(scales + 256 + 2 * lanes);
    s.dmin = Halves8(scales + 288 + 2 * lanes);
  } else if constexpr (T == TensorType::kQ6_K || T == TensorType::kQ3_K) {
    s.d = Halves8(scales + 256 + 2 * lanes);
  }
  return s;
}

// One run of 32 weights for the 8 rows (lanes) of one half: codes, one per byte, in the
// order of the activation words (wq[t]: weights 4t..4t+3, wq[t + 4]: 16+4t..16+4t+3), and
// the float scale and offset of each lane (the _hi ones for weights 16..31 where the format
// has a scale per 16).
struct RunWeights {
  __m256i wq[8];
  __m256 scale, scale_hi, offset, offset_hi;
};

template <TensorType T>
inline void LoadRun(const uint8_t* unit, int run, int half, const UnitScales& us, RunWeights& rw) {
  constexpr int kHi = HiPlanes(T);
  const PackedUnitLayout& layout = Layout<T>();
  const int lanes = 8 * half;
  const uint8_t* scales = unit + layout.scales_at;
  const uint8_t* tile = unit + 256 * run + 32 * half;
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  for (int t = 0; t < 4; ++t) {
    const __m256i packed = _mm256_load_si256(reinterpret_cast<const __m256i*>(tile + 64 * t));
    rw.wq[t] = _mm256_and_si256(packed, low_nibbles);
    rw.wq[t + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
  }
  if constexpr (kHi == 2) {  // Q6_K's bits 4 and 5, stored as pairs (PackedUnitLayout)
    const uint8_t* pairs = unit + layout.hi_at + static_cast<size_t>(run) * 128 + 32 * half;
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m256i p = _mm256_load_si256(reinterpret_cast<const __m256i*>(pairs + 64 * h));
      rw.wq[4 * h] = _mm256_or_si256(rw.wq[4 * h], _mm256_and_si256(_mm256_slli_epi16(p, 4), bits45));
      rw.wq[4 * h + 1] = _mm256_or_si256(rw.wq[4 * h + 1], _mm256_and_si256(_mm256_slli_epi16(p, 2), bits45));
      rw.wq[4 * h + 2] = _mm256_or_si256(rw.wq[4 * h + 2], _mm256_and_si256(p, bits45));
      rw.wq[4 * h + 3] = _mm256_or_si256(rw.wq[4 * h + 3], _mm256_and_si256(_mm256_srli_epi16(p, 2), bits45));
    }
  } else if constexpr (kHi > 0) {  // one plane (the Q5 formats): a mask per tile vector
    static_assert(kHi == 1, "two planes are stored as pairs");
    // Tile vector v's mask bits for lanes 8 half.. are bytes 8 v + 4 half .. + 3: one
    // 16-byte load, copied to both 128-bit lanes, serves two tile vectors.
    const uint8_t* masks = unit + layout.hi_at + static_cast<size_t>(run) * 64;
    for (int v = 0; v < 8; v += 2) {
      const __m256i pair = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(masks + 8 * v)));
      rw.wq[v] = _mm256_or_si256(rw.wq[v], ExpandMaskBytes(pair, 4 * half, _mm256_set1_epi8(16)));
      rw.wq[v + 1] = _mm256_or_si256(rw.wq[v + 1], ExpandMaskBytes(pair, 8 + 4 * half, _mm256_set1_epi8(16)));
    }
  }
  rw.scale_hi = rw.offset = rw.offset_hi = _mm256_setzero_ps();
  if constexpr (T == TensorType::kQ5_0) {
    rw.scale = Halves8(scales + 2 * lanes);
    rw.offset = _mm256_mul_ps(rw.scale, _mm256_set1_ps(-16.0f));
  } else if constexpr (T == TensorType::kQ5_1) {
    rw.scale = Halves8(scales + 2 * lanes);
    rw.offset = Halves8(scales + 32 + 2 * lanes);
  } else if constexpr (T == TensorType::kQ4_K || T == TensorType::kQ5_K) {
    rw.scale = _mm256_mul_ps(us.d, Bytes8(scales + 16 * run + lanes));
    rw.offset = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(us.dmin, Bytes8(scales + 128 + 16 * run + lanes)));
  } else if constexpr (T == TensorType::kQ2_K) {
    int64_t lo_bytes, hi_bytes;
    std::memcpy(&lo_bytes, scales + 32 * run + lanes, 8);
    std::memcpy(&hi_bytes, scales + 32 * run + 16 + lanes, 8);
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(lo_bytes));
    const __m256i hi = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(hi_bytes));
    const __m256i nibble = _mm256_set1_epi32(0x0F);
    const __m256 neg_dmin = _mm256_sub_ps(_mm256_setzero_ps(), us.dmin);
    rw.scale = _mm256_mul_ps(us.d, _mm256_cvtepi32_ps(_mm256_and_si256(lo, nibble)));
    rw.scale_hi = _mm256_mul_ps(us.d, _mm256_cvtepi32_ps(_mm256_and_si256(hi, nibble)));
    rw.offset = _mm256_mul_ps(neg_dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(lo, 4)));
    rw.offset_hi = _mm256_mul_ps(neg_dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(hi, 4)));
  } else {  // Q6_K, Q3_K
    rw.scale = _mm256_mul_ps(us.d, SignedBytes8(scales + 32 * run + lanes));
    rw.scale_hi = _mm256_mul_ps(us.d, SignedBytes8(scales + 32 * run + 16 + lanes));
  }
}

// acc plus the run's 32 products for activation row m, block b (lane j: row j's weights).
// With the broadcast activation word of the same 4 weights, vpmaddubsw gives each lane's
// 4 products in int16 pairs, as vpdpbusd does in the AVX-512 kernel.
template <TensorType T>
inline __m256 AccumulateRun(const RunWeights& rw, const QuantizedActivations& a, size_t m, int b, int nb, __m256 acc) {
  constexpr int kTerms = Int16Terms(T);
  const int8_t* x = a.q.data() + m * a.cols + b * 32;
  __m256i products[8];
  for (int t = 0; t < 4; ++t) {
    int32_t x0, x1;
    std::memcpy(&x0, x + 4 * t, 4);
    std::memcpy(&x1, x + 16 + 4 * t, 4);
    products[t] = _mm256_maddubs_epi16(rw.wq[t], _mm256_set1_epi32(x0));
    products[t + 4] = _mm256_maddubs_epi16(rw.wq[t + 4], _mm256_set1_epi32(x1));
  }
  const size_t blk = m * nb + b;
  const float dm = a.d[blk];
  const __m256 da = _mm256_set1_ps(dm);
  if constexpr (SplitRuns(T)) {
    __m256i dot0 = WidenedSum<4, kTerms>(products), dot1 = WidenedSum<4, kTerms>(products + 4);
    const int32_t* hs = a.half_sums.data() + blk * 2;
    if constexpr (T == TensorType::kQ2_K) {
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot0), _mm256_mul_ps(rw.scale, da), acc);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), _mm256_mul_ps(rw.scale_hi, da), acc);
      acc = _mm256_fmadd_ps(rw.offset, _mm256_set1_ps(dm * static_cast<float>(hs[0])), acc);
      acc = _mm256_fmadd_ps(rw.offset_hi, _mm256_set1_ps(dm * static_cast<float>(hs[1])), acc);
    } else {
      constexpr int kBias = T == TensorType::kQ6_K ? 32 : 4;
      dot0 = _mm256_sub_epi32(dot0, _mm256_set1_epi32(kBias * hs[0]));
      dot1 = _mm256_sub_epi32(dot1, _mm256_set1_epi32(kBias * hs[1]));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot0), _mm256_mul_ps(rw.scale, da), acc);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), _mm256_mul_ps(rw.scale_hi, da), acc);
    }
  } else {
    const __m256 dot = _mm256_cvtepi32_ps(WidenedSum<8, kTerms>(products));
    acc = _mm256_fmadd_ps(dot, _mm256_mul_ps(rw.scale, da), acc);
    acc = _mm256_fmadd_ps(rw.offset, _mm256_set1_ps(a.d_sum[blk]), acc);
  }
  return acc;
}

// Lanes [8 half, 8 half + 8) of a group for every activation row, kMaxRows at a time so
// that each run's unpacked weights serve all of them.
template <TensorType T>
void GroupHalf(const QuantizedWeights& w, int group, int half, const QuantizedActivations& a, float* y, int ldy) {
  constexpr int kRuns = Runs(T);
  const PackedUnitLayout& layout = Layout<T>();
  const size_t prefetch_share = PrefetchShare<T>();
  const int units = w.k / (32 * kRuns);
  const int nb = w.k / 32;
  // Rows sharing each unpacking: 8 for the 4-bit formats (faster than 4 or 16 on a Zen 3);
  // 16 where the high bits make the unpacking dearer (Q5_0 +8%, Q5_K +15%, Q6_K +10% on 64
  // rows there; 32 no better).
  constexpr int kMaxRows = HiPlanes(T) > 0 ? 16 : 8;
  for (int m0 = 0; m0 < a.rows; m0 += kMaxRows) {
    const int rows = std::min(kMaxRows, a.rows - m0);
    __m256 acc[kMaxRows];
    for (int r = 0; r < kMaxRows; ++r) acc[r] = _mm256_setzero_ps();
    const uint8_t* unit = w.packed_bytes() + static_cast<size_t>(group) * units * layout.bytes;
    for (int u = 0; u < units; ++u, unit += layout.bytes) {
      const UnitScales us = LoadUnitScales<T>(unit + layout.scales_at, 8 * half);
      for (int run = 0; run < kRuns; ++run) {
        // The first pass over the group asks for each run's share of the unit ahead, as the
        // AVX-512 kernel does (weight_prefetch.h); the second half reads the same lines.
        if (half == 0 && m0 == 0) PrefetchWeights(unit + run * prefetch_share, prefetch_share, w.packed_end());
        RunWeights rw;
        LoadRun<T>(unit, run, half, us, rw);
        for (int r = 0; r < rows; ++r) acc[r] = AccumulateRun<T>(rw, a, m0 + r, u * kRuns + run, nb, acc[r]);
      }
    }
    for (int r = 0; r < rows; ++r) {
      _mm256_storeu_ps(y + static_cast<size_t>(m0 + r) * ldy + group * kRows + 8 * half, acc[r]);
    }
  }
}

// R (1 or 2) activation rows, a decode step's (two with its remainder's): both halves per
// run in one pass over the group, the accumulators in registers. Each lane's float steps
// are GroupHalf's in the same order, so a row's outputs do not depend on how many rows
// share the product.
template <TensorType T, int R>
void GroupFewRows(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  constexpr int kRuns = Runs(T);
  const PackedUnitLayout& layout = Layout<T>();
  const size_t prefetch_share = PrefetchShare<T>();
  const int units = w.k / (32 * kRuns);
  const int nb = w.k / 32;
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  const uint8_t* unit = w.packed_bytes() + static_cast<size_t>(group) * units * layout.bytes;
  for (int u = 0; u < units; ++u, unit += layout.bytes) {
    const UnitScales us0 = LoadUnitScales<T>(unit + layout.scales_at, 0);
    const UnitScales us1 = LoadUnitScales<T>(unit + layout.scales_at, 8);
    for (int run = 0; run < kRuns; ++run) {
      PrefetchWeights(unit + run * prefetch_share, prefetch_share, w.packed_end());
      RunWeights rw;
      LoadRun<T>(unit, run, 0, us0, rw);
      for (int r = 0; r < R; ++r) acc0[r] = AccumulateRun<T>(rw, a, r, u * kRuns + run, nb, acc0[r]);
      LoadRun<T>(unit, run, 1, us1, rw);
      for (int r = 0; r < R; ++r) acc1[r] = AccumulateRun<T>(rw, a, r, u * kRuns + run, nb, acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(y + static_cast<size_t>(r) * ldy + group * kRows, acc0[r]);
    _mm256_storeu_ps(y + static_cast<size_t>(r) * ldy + group * kRows + 8, acc1[r]);
  }
}

template <TensorType T>
void GroupOfType(const QuantizedWeights& w, int group, const QuantizedActivations& a, float* y, int ldy) {
  if (a.rows <= 2) {
    if (a.rows == 1) {
      GroupFewRows<T, 1>(w, group, a, y, ldy);
    } else {
      GroupFewRows<T, 2>(w, group, a, y, ldy);
    }
    return;
  }
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
