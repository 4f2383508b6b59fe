// Device helpers shared by the module's kernels (cuda_kernels.cu, cuda_experts.cu): warp
// sums, the gate activations, and the decoders of the GGUF block formats the GEMVs read.
// The decoders are host functions too, so that a test without a GPU checks them against the
// CPU's dequantizer (tests/cuda_block_decoders_test.cu).
#ifndef HETERO_GPU_CUDA_BLOCKS_CUH_
#define HETERO_GPU_CUDA_BLOCKS_CUH_

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hetero::gpu {

inline constexpr unsigned kFullMask = 0xffffffffu;

#define HETERO_DECODER __host__ __device__ __forceinline__
// Unrolling asked of nvcc's device pass only (the host compiler does not know the pragma).
#if defined(__CUDA_ARCH__)
#define HETERO_UNROLL _Pragma("unroll")
#else
#define HETERO_UNROLL
#endif

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

HETERO_DECODER float LoadHalf(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

// Sixteen weights of one block: half 0 is elements 0..15, half 1 elements 16..31 (the
// high nibbles of Q4's 16 bytes, the second 16 bytes of Q8_0). Block starts are 2-byte
// aligned (18, 20 and 34 byte blocks), so quants are read as 16-bit words.
template <int kFormat>
HETERO_DECODER void LoadHalfBlock(const uint8_t* blk, int half, float* w) {
  if constexpr (kFormat == 8) {  // Q8_0: d, 32 int8
    const float d = LoadHalf(blk);
    const uint16_t* q = reinterpret_cast<const uint16_t*>(blk + 2) + 8 * half;
HETERO_UNROLL
    for (int i = 0; i < 8; ++i) {
      const uint16_t pair = q[i];
      w[2 * i] = d * static_cast<float>(static_cast<int8_t>(pair & 0xFF));
      w[2 * i + 1] = d * static_cast<float>(static_cast<int8_t>(pair >> 8));
    }
  } else {
    const float d = LoadHalf(blk);
    const float offset = kFormat == 3 ? LoadHalf(blk + 2) : -8.0f * d;  // Q4_1 minimum, Q4_0's -8 d
    const uint16_t* q = reinterpret_cast<const uint16_t*>(blk + (kFormat == 3 ? 4 : 2));
    const int shift = 4 * half;
HETERO_UNROLL
    for (int i = 0; i < 8; ++i) {
      const uint16_t pair = q[i];
      w[2 * i] = d * static_cast<float>((pair >> shift) & 0xF) + offset;
      w[2 * i + 1] = d * static_cast<float>((pair >> (8 + shift)) & 0xF) + offset;
    }
  }
}

// The 6-bit scale and min of group j (0..7) of a Q4_K/Q5_K super-block's packed 12 bytes.
HETERO_DECODER void UnpackScaleMin(const uint8_t* packed, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// Sixteen weights of a 32-element Q5_0 (format 6) or Q5_1 (7) block: half 0 is elements
// 0..15 (low nibbles), half 1 elements 16..31 (high nibbles); the fifth bits in qh.
template <int kFormat>
HETERO_DECODER void LoadQ5HalfBlock(const uint8_t* blk, int half, float* w) {
  const float d = LoadHalf(blk);
  const float m = kFormat == 7 ? LoadHalf(blk + 2) : 0.0f;
  const uint8_t* qhp = blk + (kFormat == 7 ? 4 : 2);
  const uint32_t qh = qhp[0] | (qhp[1] << 8) | (qhp[2] << 16) | (static_cast<uint32_t>(qhp[3]) << 24);
  const uint8_t* qs = qhp + 4;
HETERO_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int x = half == 0 ? ((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) : ((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
    w[j] = kFormat == 7 ? static_cast<float>(x) * d + m : static_cast<float>(x - 16) * d;
  }
}

// Sixteen weights, elements e0..e0+15 (e0 a multiple of 16), of a 256-element K super-block:
// Q4_K (12) { d, dmin, scales[12], qs[128] }, Q5_K (13) { d, dmin, scales[12], qh[32],
// qs[128] }, Q6_K (14) { ql[128], qh[64], i8 scales[16], d }. Sixteen aligned elements
// share one scale (and min), so each weight is one multiply-add (the CPU's formula; nvcc may
// fuse it, so not always its last bit).
template <int kFormat>
HETERO_DECODER void LoadKUnit(const uint8_t* sb, int e0, float* w) {
  if constexpr (kFormat == 14) {
    const int h = e0 / 128, r = e0 % 128, quarter = r / 32, l0 = r % 32;
    const uint8_t* ql = sb + h * 64 + ((quarter & 1) ? 32 : 0) + l0;
    const uint8_t* qh = sb + 128 + h * 32 + l0;
    const int8_t scale = reinterpret_cast<const int8_t*>(sb + 192)[h * 8 + l0 / 16 + 2 * quarter];
    const float ds = LoadHalf(sb + 208) * static_cast<float>(scale);
    const int shift = 2 * quarter;
HETERO_UNROLL
    for (int i = 0; i < 16; ++i) {
      const int low = quarter < 2 ? (ql[i] & 0x0F) : (ql[i] >> 4);
      const int q = (low | (((qh[i] >> shift) & 3) << 4)) - 32;
      w[i] = ds * static_cast<float>(q);
    }
  } else {
    const int c = e0 / 64, r = e0 % 64, group = 2 * c + (r >= 32 ? 1 : 0), l0 = r % 32;
    int scale, min;
    UnpackScaleMin(sb + 4, group, &scale, &min);
    const float d1 = LoadHalf(sb) * static_cast<float>(scale);
    const float m1 = LoadHalf(sb + 2) * static_cast<float>(min);
    const uint8_t* qs = sb + (kFormat == 13 ? 48 : 16) + 32 * c + l0;
HETERO_UNROLL
    for (int i = 0; i < 16; ++i) {
      int q = r >= 32 ? (qs[i] >> 4) : (qs[i] & 0x0F);
      if constexpr (kFormat == 13) q += (sb[16 + l0 + i] >> group) & 1 ? 16 : 0;
      w[i] = d1 * static_cast<float>(q) - m1;
    }
  }
}

// The sixteen values of IQ4_NL's and IQ4_XS's 4-bit codebook (ggml's table).
HETERO_DECODER float Iq4Value(int code) {
  constexpr int8_t kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return static_cast<float>(kValues[code]);
}

// Sixteen weights of a 32-element IQ4_NL block { d, qs[16] }: half 0 the low nibbles, half 1
// the high ones, each a codebook index times d.
HETERO_DECODER void LoadIq4NlHalfBlock(const uint8_t* blk, int half, float* w) {
  const float d = LoadHalf(blk);
  const uint8_t* qs = blk + 2;
HETERO_UNROLL
  for (int j = 0; j < 16; ++j) w[j] = d * Iq4Value(half == 0 ? (qs[j] & 0x0F) : (qs[j] >> 4));
}

// Sixteen weights, elements e0..e0+15 (e0 a multiple of 16), of a 256-element super-block of
// the formats whose sixteen-element groups each have their own 4- or 6-bit scale:
// Q2_K (10) { scales[16] (scale | min << 4), qs[64], d, dmin }: 2-bit values in four planes
// of each 32-byte half; Q3_K (11) { hmask[32], qs[64], scales[12] (16 6-bit, offset 32), d }:
// 2 low bits as Q2_K's, the third bit in hmask (set means no -4); IQ4_XS (23) { d,
// scales_h (2 high bits of 8 6-bit scales), scales_l[4] (their low nibbles), qs[128] }.
template <int kFormat>
HETERO_DECODER void LoadSmallKUnit(const uint8_t* sb, int e0, float* w) {
  if constexpr (kFormat == 23) {
    const int sub = e0 / 32, hi = (e0 % 32) / 16;
    const int scale_h = sb[2] | (sb[3] << 8);
    const int ls = ((sb[4 + sub / 2] >> (4 * (sub % 2))) & 0x0F) | (((scale_h >> (2 * sub)) & 3) << 4);
    const float dl = LoadHalf(sb) * static_cast<float>(ls - 32);
    const uint8_t* qs = sb + 8 + 16 * sub;
HETERO_UNROLL
    for (int j = 0; j < 16; ++j) w[j] = dl * Iq4Value(hi == 0 ? (qs[j] & 0x0F) : (qs[j] >> 4));
  } else {
    // Both 2-bit layouts: element e is bits 2 j.. of qs[32 h + l] for e = 128 h + 32 j + l.
    const int h = e0 / 128, j = (e0 % 128) / 32, l0 = e0 % 32;
    const uint8_t* qs = sb + (kFormat == 10 ? 16 : 32) + 32 * h + l0;
    const int group = e0 / 16, shift = 2 * j;
    if constexpr (kFormat == 10) {
      const float dl = LoadHalf(sb + 80) * static_cast<float>(sb[group] & 0x0F);
      const float ml = LoadHalf(sb + 82) * static_cast<float>(sb[group] >> 4);
HETERO_UNROLL
      for (int i = 0; i < 16; ++i) w[i] = dl * static_cast<float>((qs[i] >> shift) & 3) - ml;
    } else {
      const uint8_t* packed = sb + 96;
      const int low = group < 8 ? (packed[group] & 0x0F) : (packed[group - 8] >> 4);
      const int high = (packed[8 + group % 4] >> (2 * (group / 4))) & 3;
      const float dl = LoadHalf(sb + 108) * static_cast<float>((low | (high << 4)) - 32);
      const uint8_t* hmask = sb + l0;
      const int bit = 4 * h + j;
HETERO_UNROLL
      for (int i = 0; i < 16; ++i) {
        const int q = ((qs[i] >> shift) & 3) - (((hmask[i] >> bit) & 1) ? 0 : 4);
        w[i] = dl * static_cast<float>(q);
      }
    }
  }
}

// Elements and bytes of one block of a GEMV format (format 1, float16: one element, 2 bytes;
// 0 bytes for a format the GEMV does not read): the kernels' addressing and the module's
// upload checks use the same table.
struct BlockGeometry {
  int elements, bytes;
};
constexpr BlockGeometry GemvBlock(int format) {
  switch (format) {
    case 1: return {1, 2};
    case 2: return {32, 18};
    case 3: return {32, 20};
    case 10: return {256, 84};
    case 11: return {256, 110};
    case 20: return {32, 18};
    case 23: return {256, 136};
    case 6: return {32, 22};
    case 7: return {32, 24};
    case 8: return {32, 34};
    case 12: return {256, 144};
    case 13: return {256, 176};
    case 14: return {256, 210};
    default: return {1, 0};
  }
}

template <int kFormat>
HETERO_DECODER void LoadUnit(const void* weights, int row, int k, int unit, float* w) {
  constexpr BlockGeometry kBlock = GemvBlock(kFormat);
  // The block holding this unit's sixteen weights, and where in it they start.
  const uint8_t* block = static_cast<const uint8_t*>(weights) +
                         (static_cast<size_t>(row) * (k / kBlock.elements) + 16 * unit / kBlock.elements) * kBlock.bytes;
  if constexpr (kFormat == 12 || kFormat == 13 || kFormat == 14) {
    LoadKUnit<kFormat>(block, (unit % 16) * 16, w);
  } else if constexpr (kFormat == 10 || kFormat == 11 || kFormat == 23) {
    LoadSmallKUnit<kFormat>(block, (unit % 16) * 16, w);
  } else if constexpr (kFormat == 20) {
    LoadIq4NlHalfBlock(block, unit & 1, w);
  } else if constexpr (kFormat == 6 || kFormat == 7) {
    LoadQ5HalfBlock<kFormat>(block, unit & 1, w);
  } else if constexpr (kFormat == 1) {
#if !defined(__CUDA_ARCH__)
    // The host (tests): element by element; the device pass reads two 16-byte vectors.
    for (int i = 0; i < 16; ++i) w[i] = LoadHalf(block + 2 * i);
    return;
#endif
    const __half* src = reinterpret_cast<const __half*>(block);
    const uint4 a = reinterpret_cast<const uint4*>(src)[0];
    const uint4 b = reinterpret_cast<const uint4*>(src)[1];
    const __half* ha = reinterpret_cast<const __half*>(&a);
    const __half* hb = reinterpret_cast<const __half*>(&b);
HETERO_UNROLL
    for (int i = 0; i < 8; ++i) {
      w[i] = __half2float(ha[i]);
      w[8 + i] = __half2float(hb[i]);
    }
  } else {
    LoadHalfBlock<kFormat>(block, unit & 1, w);
  }
}

// Unit `index` of a rows x k matrix in kFormat (units numbered row by row, k / 16 per row),
// decoded and rounded to float16 at its place in the row-major `out`: the body of the prompt
// path's dequantize kernel (one unit per thread), run by the host test over whole matrices.
template <int kFormat>
HETERO_DECODER void DequantizeUnitToHalf(const void* weights, int k, size_t index, __half* out) {
  const size_t units_per_row = static_cast<size_t>(k / 16);
  const int row = static_cast<int>(index / units_per_row), unit = static_cast<int>(index % units_per_row);
  float w[16];
  LoadUnit<kFormat>(weights, row, k, unit, w);
  __half* dst = out + static_cast<size_t>(row) * k + 16 * unit;
#if defined(__CUDA_ARCH__)
  // Two 16-byte stores: every unit starts 32-byte aligned where `out` is (k is a multiple
  // of 32; the module's scratch and its parts' offsets are).
  __align__(16) __half2 h[8];
HETERO_UNROLL
  for (int i = 0; i < 8; ++i) h[i] = __floats2half2_rn(w[2 * i], w[2 * i + 1]);
  reinterpret_cast<uint4*>(dst)[0] = reinterpret_cast<const uint4*>(h)[0];
  reinterpret_cast<uint4*>(dst)[1] = reinterpret_cast<const uint4*>(h)[1];
#else
  for (int i = 0; i < 16; ++i) dst[i] = __float2half_rn(w[i]);
#endif
}

// Sixteen elements (unit `unit`) of the embedding of `token`, scaled, into that token's
// row `out_row` of the residual stream: the embedding kernel's body (the table in any
// format LoadUnit reads, so a quantized table needs no float16 copy).
template <int kFormat>
HETERO_DECODER void EmbedUnit(const void* table, int n_embd, int token, int unit, float scale, float* out_row) {
  float w[16];
  LoadUnit<kFormat>(table, token, n_embd, unit, w);
HETERO_UNROLL
  for (int i = 0; i < 16; ++i) out_row[16 * unit + i] = w[i] * scale;
}

// SiLU, or GELU in its tanh form written as g * sigmoid(2 sqrt(2/pi) (g + 0.044715 g^3)), as
// the CPU backend computes it (0.5 g (1 + tanh) cancels to 0 for very negative g).
__device__ __forceinline__ float GateActivation(float g, bool gelu) {
  if (!gelu) return g / (1.0f + expf(-g));
  const float z = 1.5957691216057308f * (g + 0.044715f * g * g * g);
  return g / (1.0f + expf(-z));
}

// The sum of `v` over the block (every thread gets it); `partial` holds 32 floats.
__device__ __forceinline__ float BlockSum(float v, float* partial) {
  v = WarpSum(v);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
    w = WarpSum(w);
    if (threadIdx.x == 0) partial[0] = w;
  }
  __syncthreads();
  const float total = partial[0];
  __syncthreads();  // partial may be reused at once
  return total;
}

// Calls fn(std::integral_constant<int, format>) for a format LoadUnit reads (host side:
// picks the kernel instantiation); false for any other.
template <typename Fn>
inline bool WithGemvFormat(int format, Fn&& fn) {
  switch (format) {
    case 1: fn(std::integral_constant<int, 1>{}); return true;
    case 2: fn(std::integral_constant<int, 2>{}); return true;
    case 3: fn(std::integral_constant<int, 3>{}); return true;
    case 6: fn(std::integral_constant<int, 6>{}); return true;
    case 7: fn(std::integral_constant<int, 7>{}); return true;
    case 8: fn(std::integral_constant<int, 8>{}); return true;
    case 10: fn(std::integral_constant<int, 10>{}); return true;
    case 11: fn(std::integral_constant<int, 11>{}); return true;
    case 20: fn(std::integral_constant<int, 20>{}); return true;
    case 23: fn(std::integral_constant<int, 23>{}); return true;
    case 12: fn(std::integral_constant<int, 12>{}); return true;
    case 13: fn(std::integral_constant<int, 13>{}); return true;
    case 14: fn(std::integral_constant<int, 14>{}); return true;
    default: return false;
  }
}

}  // namespace hetero::gpu

#endif  // HETERO_GPU_CUDA_BLOCKS_CUH_
