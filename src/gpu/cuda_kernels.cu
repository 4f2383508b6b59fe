#include "src/gpu/cuda_kernels.cuh"

#include <cmath>

namespace hetero::gpu {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float LoadHalf(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

// Sixteen weights of one block: half 0 is elements 0..15, half 1 elements 16..31 (the
// high nibbles of Q4's 16 bytes, the second 16 bytes of Q8_0). Block starts are 2-byte
// aligned (18, 20 and 34 byte blocks), so quants are read as 16-bit words.
template <int kFormat>
__device__ __forceinline__ void LoadHalfBlock(const uint8_t* blk, int half, float* w) {
  if constexpr (kFormat == 8) {  // Q8_0: d, 32 int8
    const float d = LoadHalf(blk);
    const uint16_t* q = reinterpret_cast<const uint16_t*>(blk + 2) + 8 * half;
#pragma unroll
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
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint16_t pair = q[i];
      w[2 * i] = d * static_cast<float>((pair >> shift) & 0xF) + offset;
      w[2 * i + 1] = d * static_cast<float>((pair >> (8 + shift)) & 0xF) + offset;
    }
  }
}

// One warp per output; lanes take half-blocks of 16 weights in turn, so every weight is
// read once per pass whatever the batch, and each activation row meets it in registers.
template <int kFormat>
__global__ void GemvKernel(const uint8_t* __restrict__ weights, int n, int k, const float* __restrict__ x, int rows,
                           float* __restrict__ y, bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int j = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (j >= n) return;
  const int units = k / 16;
  float acc[kMaxGemvRows];
#pragma unroll
  for (int m = 0; m < kMaxGemvRows; ++m) acc[m] = 0.0f;
  for (int u = lane; u < units; u += 32) {
    float w[16];
    if constexpr (kFormat == 1) {
      const __half* row = reinterpret_cast<const __half*>(weights) + static_cast<size_t>(j) * k + 16 * u;
      const uint4 a = reinterpret_cast<const uint4*>(row)[0];
      const uint4 b = reinterpret_cast<const uint4*>(row)[1];
      const __half* ha = reinterpret_cast<const __half*>(&a);
      const __half* hb = reinterpret_cast<const __half*>(&b);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        w[i] = __half2float(ha[i]);
        w[8 + i] = __half2float(hb[i]);
      }
    } else {
      constexpr int kBlockBytes = kFormat == 8 ? 34 : (kFormat == 3 ? 20 : 18);
      const uint8_t* blk = weights + (static_cast<size_t>(j) * (k / 32) + (u >> 1)) * kBlockBytes;
      LoadHalfBlock<kFormat>(blk, u & 1, w);
    }
#pragma unroll
    for (int m = 0; m < kMaxGemvRows; ++m) {
      if (m >= rows) break;
      const float4* xv = reinterpret_cast<const float4*>(x + static_cast<size_t>(m) * k + 16 * u);
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 v = xv[i];
        s += w[4 * i] * v.x + w[4 * i + 1] * v.y + w[4 * i + 2] * v.z + w[4 * i + 3] * v.w;
      }
      acc[m] += s;
    }
  }
#pragma unroll
  for (int m = 0; m < kMaxGemvRows; ++m) {
    if (m >= rows) break;
    const float s = WarpSum(acc[m]);
    if (lane == 0) {
      float* out = y + static_cast<size_t>(m) * n + j;
      *out = accumulate ? *out + s : s;
    }
  }
}

__global__ void EmbedKernel(const __half* __restrict__ table, const int32_t* __restrict__ tokens, int n_embd,
                            float* __restrict__ out) {
  const __half* src = table + static_cast<size_t>(tokens[blockIdx.x]) * n_embd;
  float* dst = out + static_cast<size_t>(blockIdx.x) * n_embd;
  for (int i = threadIdx.x; i < n_embd; i += blockDim.x) dst[i] = __half2float(src[i]);
}

__global__ void RmsNormKernel(const float* __restrict__ x, const int32_t* __restrict__ index,
                              const float* __restrict__ weight, int n, float eps, float* __restrict__ out) {
  const int src_row = index != nullptr ? index[blockIdx.x] : blockIdx.x;
  const float* row = x + static_cast<size_t>(src_row) * n;
  float* dst = out + static_cast<size_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += row[i] * row[i];
  __shared__ float partial[32];
  ss = WarpSum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
    v = WarpSum(v);
    if (threadIdx.x == 0) partial[0] = v;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = row[i] * scale * weight[i];
}

__global__ void ToHalfKernel(const float* __restrict__ x, size_t count, __half* __restrict__ out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2half_rn(x[i]);
  }
}

__global__ void SiluMulKernel(float* __restrict__ gate, const float* __restrict__ up, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__device__ __forceinline__ void AddBias(float* v, const float* bias, int count) {
  if (bias == nullptr) return;
  for (int i = threadIdx.x; i < count; i += blockDim.x) v[i] += bias[i];
}

__device__ void RotateHeads(float* v, int heads, int head_dim, int rope_dim, bool neox, const double* inv_freq,
                            int position) {
  const int half = rope_dim / 2;
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    // Double angles, as the CPU backend: float loses the phase at long positions.
    double s, c;
    sincos(static_cast<double>(position) * inv_freq[i], &s, &c);
    const float sf = static_cast<float>(s), cf = static_cast<float>(c);
    float* head = v + static_cast<size_t>(h) * head_dim;
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cf - x1 * sf;
    head[b] = x0 * sf + x1 * cf;
  }
}

__global__ void RopeAndStoreKernel(float* q, float* k, float* v, const float* q_bias, const float* k_bias,
                                   const float* v_bias, RopeArgs rope, RowMap map, KvLayout kv, int layer) {
  const int r = blockIdx.x;
  const int qd = rope.n_heads * rope.head_dim;
  const int kvd = rope.n_kv_heads * rope.head_dim;
  float* qr = q + static_cast<size_t>(r) * qd;
  float* kr = k + static_cast<size_t>(r) * kvd;
  float* vr = v + static_cast<size_t>(r) * kvd;
  AddBias(qr, q_bias, qd);
  AddBias(kr, k_bias, kvd);
  AddBias(vr, v_bias, kvd);
  __syncthreads();
  const int position = map.positions[r];
  RotateHeads(qr, rope.n_heads, rope.head_dim, rope.rope_dim, rope.neox, rope.inv_freq, position);
  RotateHeads(kr, rope.n_kv_heads, rope.head_dim, rope.rope_dim, rope.neox, rope.inv_freq, position);
  __syncthreads();
  const int32_t block = map.block_tables[static_cast<size_t>(map.seq_of_row[r]) * map.table_stride +
                                         position / kv.block_tokens];
  float* base = kv.pool + static_cast<size_t>(block) * kv.block_floats + static_cast<size_t>(layer) * kv.layer_floats +
                static_cast<size_t>(position % kv.block_tokens) * rope.head_dim;
  for (int idx = threadIdx.x; idx < kvd; idx += blockDim.x) {
    const int g = idx / rope.head_dim, d = idx % rope.head_dim;
    base[g * kv.head_floats + d] = kr[idx];
    base[(rope.n_kv_heads + g) * kv.head_floats + d] = vr[idx];
  }
}

// One block per (row, head); each warp walks every kAttentionWarps-th key with an online
// softmax, and the warps' partial results are merged at the end.
__global__ void AttentionKernel(const float* __restrict__ q, int n_heads, int n_kv_heads, int head_dim, RowMap map,
                                KvLayout kv, int layer, float scale, float* __restrict__ out) {
  const int r = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int per_lane = head_dim / 32;
  const int g = h / (n_heads / n_kv_heads);
  const float* qv = q + (static_cast<size_t>(r) * n_heads + h) * head_dim;
  float qreg[kMaxHeadDimPerLane], acc[kMaxHeadDimPerLane];
#pragma unroll
  for (int t = 0; t < kMaxHeadDimPerLane; ++t) {
    qreg[t] = t < per_lane ? qv[lane + 32 * t] * scale : 0.0f;
    acc[t] = 0.0f;
  }
  const int n_keys = map.positions[r] + 1;
  const int32_t* table = map.block_tables + static_cast<size_t>(map.seq_of_row[r]) * map.table_stride;
  const size_t layer_offset = static_cast<size_t>(layer) * kv.layer_floats;
  float running_max = -INFINITY, denom = 0.0f;
  for (int j = warp; j < n_keys; j += kAttentionWarps) {
    const float* block = kv.pool + static_cast<size_t>(table[j / kv.block_tokens]) * kv.block_floats + layer_offset;
    const size_t slot = static_cast<size_t>(j % kv.block_tokens) * head_dim;
    const float* key = block + g * kv.head_floats + slot;
    const float* value = block + (n_kv_heads + g) * kv.head_floats + slot;
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < kMaxHeadDimPerLane; ++t) {
      if (t < per_lane) s += qreg[t] * key[lane + 32 * t];
    }
    s = WarpSum(s);
    const float new_max = fmaxf(running_max, s);
    const float correction = __expf(running_max - new_max);
    const float p = __expf(s - new_max);
    denom = denom * correction + p;
#pragma unroll
    for (int t = 0; t < kMaxHeadDimPerLane; ++t) {
      if (t < per_lane) acc[t] = acc[t] * correction + p * value[lane + 32 * t];
    }
    running_max = new_max;
  }
  __shared__ float warp_max[kAttentionWarps], warp_denom[kAttentionWarps];
  __shared__ float warp_acc[kAttentionWarps][32 * kMaxHeadDimPerLane];
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_denom[warp] = denom;
  }
#pragma unroll
  for (int t = 0; t < kMaxHeadDimPerLane; ++t) {
    if (t < per_lane) warp_acc[warp][lane + 32 * t] = acc[t];
  }
  __syncthreads();
  float total_max = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w) total_max = fmaxf(total_max, warp_max[w]);
  float total_denom = 0.0f;
  float weights[kAttentionWarps];
  for (int w = 0; w < kAttentionWarps; ++w) {
    weights[w] = warp_denom[w] > 0.0f ? __expf(warp_max[w] - total_max) : 0.0f;
    total_denom += warp_denom[w] * weights[w];
  }
  float* o = out + (static_cast<size_t>(r) * n_heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w) sum += warp_acc[w][d] * weights[w];
    o[d] = sum / total_denom;
  }
}

int GridFor(size_t count, int threads) {
  const size_t blocks = (count + threads - 1) / threads;
  return static_cast<int>(blocks < 4096 ? (blocks == 0 ? 1 : blocks) : 4096);
}

}  // namespace

cudaError_t LaunchGemv(int format, const void* weights, int n, int k, const float* x, int rows, float* y,
                       bool accumulate, cudaStream_t stream) {
  constexpr int kWarpsPerBlock = 8;
  const dim3 grid((n + kWarpsPerBlock - 1) / kWarpsPerBlock), block(32 * kWarpsPerBlock);
  const auto* w = static_cast<const uint8_t*>(weights);
  switch (format) {
    case 1:
      GemvKernel<1><<<grid, block, 0, stream>>>(w, n, k, x, rows, y, accumulate);
      break;
    case 2:
      GemvKernel<2><<<grid, block, 0, stream>>>(w, n, k, x, rows, y, accumulate);
      break;
    case 3:
      GemvKernel<3><<<grid, block, 0, stream>>>(w, n, k, x, rows, y, accumulate);
      break;
    case 8:
      GemvKernel<8><<<grid, block, 0, stream>>>(w, n, k, x, rows, y, accumulate);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

void LaunchEmbed(const __half* table, const int32_t* tokens, int rows, int n_embd, float* out, cudaStream_t stream) {
  EmbedKernel<<<rows, 256, 0, stream>>>(table, tokens, n_embd, out);
}

void LaunchRmsNorm(const float* x, const int32_t* index, const float* weight, int rows, int n, float eps, float* out,
                   cudaStream_t stream) {
  RmsNormKernel<<<rows, 256, 0, stream>>>(x, index, weight, n, eps, out);
}

void LaunchToHalf(const float* x, size_t count, __half* out, cudaStream_t stream) {
  ToHalfKernel<<<GridFor(count, 256), 256, 0, stream>>>(x, count, out);
}

void LaunchSiluMul(float* gate, const float* up, size_t count, cudaStream_t stream) {
  SiluMulKernel<<<GridFor(count, 256), 256, 0, stream>>>(gate, up, count);
}

void LaunchRopeAndStore(float* q, float* k, float* v, const float* q_bias, const float* k_bias, const float* v_bias,
                        int rows, const RopeArgs& rope, const RowMap& map, const KvLayout& kv, int layer,
                        cudaStream_t stream) {
  RopeAndStoreKernel<<<rows, 256, 0, stream>>>(q, k, v, q_bias, k_bias, v_bias, rope, map, kv, layer);
}

void LaunchAttention(const float* q, int rows, int n_heads, int n_kv_heads, int head_dim, const RowMap& map,
                     const KvLayout& kv, int layer, float* out, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  AttentionKernel<<<dim3(rows, n_heads), 32 * kAttentionWarps, 0, stream>>>(q, n_heads, n_kv_heads, head_dim, map, kv,
                                                                             layer, scale, out);
}

}  // namespace hetero::gpu
