#include "src/gpu/cuda_kernels.cuh"

#include <algorithm>
#include <cmath>

#include "src/gpu/cuda_blocks.cuh"

namespace hetero::gpu {
namespace {

// Sixteen-weight dot products of one unit against every activation row.
template <int kRows>
__device__ __forceinline__ void DotUnit(const float* w, const float* __restrict__ x, int k, int unit, int rows,
                                        float* acc) {
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (m < rows) {
      const float4* xv = reinterpret_cast<const float4*>(x + static_cast<size_t>(m) * k + 16 * unit);
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 v = xv[i];
        s += w[4 * i] * v.x + w[4 * i + 1] * v.y + w[4 * i + 2] * v.z + w[4 * i + 3] * v.w;
      }
      acc[m] += s;
    }
  }
}

constexpr int kGemvWarps = 8;

// One warp per output (per pair of outputs in SwiGLU mode); lanes take half-blocks of 16
// weights in turn, so each weight is read once per launch whatever the batch and meets
// every activation row in registers.
template <int kFormat, int kRows, bool kSwiglu>
__global__ void __launch_bounds__(32 * kGemvWarps) GemvKernel(GemvLaunch a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ float row_scale[kRows];
  if (a.norm_weight != nullptr) {
    // RMS of each activation row (every block recomputes it: k is small, x sits in L2).
    for (int m = warp; m < a.rows; m += kGemvWarps) {
      const float* xr = a.x + static_cast<size_t>(m) * a.k;
      float ss = 0.0f;
      for (int i = lane; i < a.k; i += 32) ss += xr[i] * xr[i];
      ss = WarpSum(ss);
      if (lane == 0) row_scale[m] = rsqrtf(ss / static_cast<float>(a.k) + a.eps);
    }
    __syncthreads();
  }
  // Which segment and output this warp computes.
  int j = blockIdx.x * kGemvWarps + warp;
  int seg = 0;
  if constexpr (!kSwiglu) {
    while (seg < a.n_segments && j >= a.segments[seg].n) j -= a.segments[seg++].n;
    if (seg >= a.n_segments) return;
  } else if (j >= a.segments[0].n) {
    return;
  }
  const GemvSegment& s = a.segments[seg];
  const int units = a.k / 16;
  float acc[kRows], acc_up[kSwiglu ? kRows : 1];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
  if constexpr (kSwiglu) {
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc_up[m] = 0.0f;
  }
  for (int u = lane; u < units; u += 32) {
    float norm[16];
    if (a.norm_weight != nullptr) {
      const float4* nw = reinterpret_cast<const float4*>(a.norm_weight + 16 * u);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 v = nw[i];
        norm[4 * i] = v.x;
        norm[4 * i + 1] = v.y;
        norm[4 * i + 2] = v.z;
        norm[4 * i + 3] = v.w;
      }
    }
    float w[16];
    LoadUnit<kFormat>(s.weights, j, a.k, u, w);
    if (a.norm_weight != nullptr) {
#pragma unroll
      for (int i = 0; i < 16; ++i) w[i] *= norm[i];
    }
    DotUnit<kRows>(w, a.x, a.k, u, a.rows, acc);
    if constexpr (kSwiglu) {
      LoadUnit<kFormat>(a.segments[1].weights, j, a.k, u, w);
      if (a.norm_weight != nullptr) {
#pragma unroll
        for (int i = 0; i < 16; ++i) w[i] *= norm[i];
      }
      DotUnit<kRows>(w, a.x, a.k, u, a.rows, acc_up);
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (m < a.rows) {
      float v = WarpSum(acc[m]);
      if (a.norm_weight != nullptr) v *= row_scale[m];
      if constexpr (kSwiglu) {
        float up = WarpSum(acc_up[m]);
        if (a.norm_weight != nullptr) up *= row_scale[m];
        v = GateActivation(v, a.gelu) * up;
      }
      if (lane == 0) {
        float* out = s.out + static_cast<size_t>(m) * s.ld + j;
        *out = s.accumulate ? *out + s.scale * v : v;
      }
    }
  }
}

template <int kFormat, bool kSwiglu>
cudaError_t LaunchGemvRows(const GemvLaunch& a, dim3 grid, dim3 block, cudaStream_t stream) {
  // The row count rounded up to a power of two sizes the accumulators.
  if (a.rows <= 1) {
    GemvKernel<kFormat, 1, kSwiglu><<<grid, block, 0, stream>>>(a);
  } else if (a.rows <= 4) {
    GemvKernel<kFormat, 4, kSwiglu><<<grid, block, 0, stream>>>(a);
  } else {
    GemvKernel<kFormat, 8, kSwiglu><<<grid, block, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <int kFormat>
cudaError_t LaunchGemvFormat(const GemvLaunch& a, cudaStream_t stream) {
  int outputs = 0;
  if (a.swiglu) {
    outputs = a.segments[0].n;
  } else {
    for (int i = 0; i < a.n_segments; ++i) outputs += a.segments[i].n;
  }
  const dim3 grid((outputs + kGemvWarps - 1) / kGemvWarps), block(32 * kGemvWarps);
  if (a.swiglu) return LaunchGemvRows<kFormat, true>(a, grid, block, stream);
  return LaunchGemvRows<kFormat, false>(a, grid, block, stream);
}

// One block per token, a thread per sixteen elements of its row.
template <int kFormat>
__global__ void EmbedKernel(const void* __restrict__ table, const int32_t* __restrict__ tokens, int n_embd,
                            float scale, float* __restrict__ out) {
  float* dst = out + static_cast<size_t>(blockIdx.x) * n_embd;
  const int token = tokens[blockIdx.x];
  for (int unit = threadIdx.x; unit < n_embd / 16; unit += blockDim.x) {
    EmbedUnit<kFormat>(table, n_embd, token, unit, scale, dst);
  }
}

// A thread per sixteen weights, grid-strided over the matrix.
template <int kFormat>
__global__ void DequantizeToHalfKernel(const void* __restrict__ weights, int k, size_t units, __half* __restrict__ out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < units;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    DequantizeUnitToHalf<kFormat>(weights, k, i, out);
  }
}

__global__ void AddToResidualKernel(float* __restrict__ x, const float* __restrict__ t, const float* __restrict__ norm,
                                    int n, float eps, float scale) {
  float* xr = x + static_cast<size_t>(blockIdx.x) * n;
  const float* tr = t + static_cast<size_t>(blockIdx.x) * n;
  float factor = scale;
  if (norm != nullptr) {
    __shared__ float partial[32];
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += tr[i] * tr[i];
    factor *= rsqrtf(BlockSum(ss, partial) / static_cast<float>(n) + eps);
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    xr[i] += norm != nullptr ? factor * (tr[i] * norm[i]) : factor * tr[i];
  }
}

__global__ void RmsNormKernel(const float* __restrict__ x, const int32_t* __restrict__ index,
                              const float* __restrict__ weight, int n, float eps, float* __restrict__ out,
                              __half* __restrict__ out_half) {
  const int src_row = index != nullptr ? index[blockIdx.x] : blockIdx.x;
  const float* row = x + static_cast<size_t>(src_row) * n;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += row[i] * row[i];
  __shared__ float partial[32];
  const float scale = rsqrtf(BlockSum(ss, partial) / static_cast<float>(n) + eps);
  const size_t base = static_cast<size_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i] * scale * weight[i];
    if (out_half != nullptr) {
      out_half[base + i] = __float2half_rn(v);
    } else {
      out[base + i] = v;
    }
  }
}

__global__ void ToHalfKernel(const float* __restrict__ x, size_t count, __half* __restrict__ out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2half_rn(x[i]);
  }
}

__global__ void GatedActivationKernel(const float* __restrict__ gate_up, int rows, int n_ff, bool gelu,
                                      float* __restrict__ out, __half* __restrict__ out_half) {
  const size_t count = static_cast<size_t>(rows) * n_ff;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / n_ff, c = i % n_ff;
    const float g = gate_up[r * 2 * n_ff + c];
    const float v = GateActivation(g, gelu) * gate_up[r * 2 * n_ff + n_ff + c];
    if (out_half != nullptr) {
      out_half[i] = __float2half_rn(v);
    } else {
      out[i] = v;
    }
  }
}

__device__ __forceinline__ void AddBias(float* v, const float* bias, int count) {
  if (bias == nullptr) return;
  for (int i = threadIdx.x; i < count; i += blockDim.x) v[i] += bias[i];
}

// RMS norms of `groups` runs of `size` floats at v, each scaled by `weight` (size floats,
// shared); a warp per run.
__device__ void NormGroups(float* v, int groups, int size, const float* weight, float eps) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int g = warp; g < groups; g += blockDim.x >> 5) {
    float* run = v + static_cast<size_t>(g) * size;
    float ss = 0.0f;
    for (int i = lane; i < size; i += 32) ss += run[i] * run[i];
    const float scale = rsqrtf(WarpSum(ss) / static_cast<float>(size) + eps);
    for (int i = lane; i < size; i += 32) run[i] = run[i] * scale * weight[i];
  }
}

__device__ void RotateHeads(float* v, int heads, int head_dim, int rope_dim, bool neox, const double* inv_freq,
                            float attn_factor, int position) {
  const int half = rope_dim / 2;
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    // Double angles, as the CPU backend: float loses the phase at long positions.
    double s, c;
    sincos(static_cast<double>(position) * inv_freq[i], &s, &c);
    const float sf = static_cast<float>(s) * attn_factor, cf = static_cast<float>(c) * attn_factor;
    float* head = v + static_cast<size_t>(h) * head_dim;
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cf - x1 * sf;
    head[b] = x0 * sf + x1 * cf;
  }
}

__global__ void RopeAndStoreKernel(float* qkv, int qkv_stride, QkvSteps steps, RopeArgs rope, RowMap map, KvLayout kv,
                                   int layer) {
  const int r = blockIdx.x;
  const int qd = rope.n_heads * rope.head_dim;
  const int kvd = rope.n_kv_heads * rope.head_dim;
  float* qr = qkv + static_cast<size_t>(r) * qkv_stride;
  float* kr = qr + qd;
  float* vr = kr + kvd;
  AddBias(qr, steps.q_bias, qd);
  AddBias(kr, steps.k_bias, kvd);
  AddBias(vr, steps.v_bias, kvd);
  __syncthreads();
  // Per head (runs of head_dim), or one run over the whole vector.
  const bool per_head = steps.qk_norm_per_head;
  if (steps.q_norm != nullptr) {
    NormGroups(qr, per_head ? rope.n_heads : 1, per_head ? rope.head_dim : qd, steps.q_norm, steps.eps);
  }
  if (steps.k_norm != nullptr) {
    NormGroups(kr, per_head ? rope.n_kv_heads : 1, per_head ? rope.head_dim : kvd, steps.k_norm, steps.eps);
  }
  __syncthreads();
  const int position = map.positions[r];
  RotateHeads(qr, rope.n_heads, rope.head_dim, rope.rope_dim, rope.neox, rope.inv_freq, rope.attn_factor, position);
  RotateHeads(kr, rope.n_kv_heads, rope.head_dim, rope.rope_dim, rope.neox, rope.inv_freq, rope.attn_factor, position);
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
// softmax, and the warps' partial results are merged at the end. Decode rows get many warps
// (few blocks, long key runs), prompt rows few (many blocks already).
template <int kAttentionWarps>
__global__ void AttentionKernel(const float* __restrict__ q, int q_stride, int n_heads, int n_kv_heads, int head_dim, RowMap map,
                                KvLayout kv, int layer, float scale, int window, float* __restrict__ out) {
  const int r = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int per_lane = head_dim / 32;
  const int g = h / (n_heads / n_kv_heads);
  const float* qv = q + static_cast<size_t>(r) * q_stride + static_cast<size_t>(h) * head_dim;
  float qreg[kMaxHeadDimPerLane], acc[kMaxHeadDimPerLane];
#pragma unroll
  for (int t = 0; t < kMaxHeadDimPerLane; ++t) {
    qreg[t] = t < per_lane ? qv[lane + 32 * t] * scale : 0.0f;
    acc[t] = 0.0f;
  }
  const int n_keys = map.positions[r] + 1;
  const int first_key = window > 0 && n_keys > window ? n_keys - window : 0;
  const int32_t* table = map.block_tables + static_cast<size_t>(map.seq_of_row[r]) * map.table_stride;
  const size_t layer_offset = static_cast<size_t>(layer) * kv.layer_floats;
  float running_max = -INFINITY, denom = 0.0f;
  for (int j = first_key + warp; j < n_keys; j += kAttentionWarps) {
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

// One block per row; ties go to the lower index, as std::max_element on the host.
__global__ void ArgmaxKernel(const float* __restrict__ logits, int n, int32_t* __restrict__ out) {
  const float* row = logits + static_cast<size_t>(blockIdx.x) * n;
  float best = -INFINITY;
  int best_index = n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    if (v > best || (v == best && i < best_index)) {
      best = v;
      best_index = i;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(kFullMask, best, offset);
    const int idx = __shfl_xor_sync(kFullMask, best_index, offset);
    if (v > best || (v == best && idx < best_index)) {
      best = v;
      best_index = idx;
    }
  }
  __shared__ float warp_best[32];
  __shared__ int warp_index[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_index[warp] = best_index;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
      if (warp_best[w] > best || (warp_best[w] == best && warp_index[w] < best_index)) {
        best = warp_best[w];
        best_index = warp_index[w];
      }
    }
    // NaN logits compare false everywhere: fall back to index 0 rather than n.
    out[blockIdx.x] = best_index < n ? best_index : 0;
  }
}

int GridFor(size_t count, int threads) {
  const size_t blocks = (count + threads - 1) / threads;
  return static_cast<int>(blocks < 4096 ? (blocks == 0 ? 1 : blocks) : 4096);
}

}  // namespace

cudaError_t LaunchGemv(const GemvLaunch& a, cudaStream_t stream) {
  if (a.rows < 1 || a.rows > kMaxGemvRows || a.n_segments < 1 || a.n_segments > 3 || a.k % 32 != 0 ||
      a.k % GemvBlock(a.format).elements != 0 ||
      (a.swiglu && (a.n_segments != 2 || a.segments[0].n != a.segments[1].n))) {
    return cudaErrorInvalidValue;
  }
  cudaError_t launched = cudaErrorInvalidValue;
  WithGemvFormat(a.format, [&](auto f) { launched = LaunchGemvFormat<decltype(f)::value>(a, stream); });
  return launched;
}

cudaError_t LaunchEmbed(int format, const void* table, const int32_t* tokens, int rows, int n_embd, float scale,
                        float* out, cudaStream_t stream) {
  if (rows < 1 || n_embd % 32 != 0 || n_embd % GemvBlock(format).elements != 0) return cudaErrorInvalidValue;
  const int threads = std::min(256, std::max(32, n_embd / 16));
  const bool known = WithGemvFormat(format, [&](auto f) {
    EmbedKernel<decltype(f)::value><<<rows, threads, 0, stream>>>(table, tokens, n_embd, scale, out);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t LaunchDequantizeToHalf(int format, const void* weights, int rows, int k, __half* out, cudaStream_t stream) {
  if (rows < 1 || k % 32 != 0 || k % GemvBlock(format).elements != 0) return cudaErrorInvalidValue;
  const size_t units = static_cast<size_t>(rows) * (k / 16);
  const bool known = WithGemvFormat(format, [&](auto f) {
    DequantizeToHalfKernel<decltype(f)::value><<<GridFor(units, 256), 256, 0, stream>>>(weights, k, units, out);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

void LaunchAddToResidual(float* x, const float* t, const float* norm, int rows, int n, float eps, float scale,
                         cudaStream_t stream) {
  AddToResidualKernel<<<rows, 256, 0, stream>>>(x, t, norm, n, eps, scale);
}

void LaunchArgmax(const float* logits, int rows, int n, int32_t* out, cudaStream_t stream) {
  ArgmaxKernel<<<rows, 1024, 0, stream>>>(logits, n, out);
}

void LaunchRmsNorm(const float* x, const int32_t* index, const float* weight, int rows, int n, float eps, float* out,
                   __half* out_half, cudaStream_t stream) {
  RmsNormKernel<<<rows, 256, 0, stream>>>(x, index, weight, n, eps, out, out_half);
}

void LaunchToHalf(const float* x, size_t count, __half* out, cudaStream_t stream) {
  ToHalfKernel<<<GridFor(count, 256), 256, 0, stream>>>(x, count, out);
}

void LaunchGatedActivation(const float* gate_up, int rows, int n_ff, bool gelu, float* out, __half* out_half,
                           cudaStream_t stream) {
  GatedActivationKernel<<<GridFor(static_cast<size_t>(rows) * n_ff, 256), 256, 0, stream>>>(gate_up, rows, n_ff, gelu,
                                                                                             out, out_half);
}

void LaunchRopeAndStore(float* qkv, int qkv_stride, const QkvSteps& steps, int rows, const RopeArgs& rope,
                        const RowMap& map, const KvLayout& kv, int layer, cudaStream_t stream) {
  RopeAndStoreKernel<<<rows, 256, 0, stream>>>(qkv, qkv_stride, steps, rope, map, kv, layer);
}

void LaunchAttention(const float* q, int q_stride, int rows, int n_heads, int n_kv_heads, int head_dim, float scale,
                     int window, const RowMap& map, const KvLayout& kv, int layer, float* out, cudaStream_t stream) {
  if (rows <= kGraphMaxRows) {
    AttentionKernel<16><<<dim3(rows, n_heads), 32 * 16, 0, stream>>>(q, q_stride, n_heads, n_kv_heads, head_dim, map,
                                                                      kv, layer, scale, window, out);
  } else {
    AttentionKernel<4><<<dim3(rows, n_heads), 32 * 4, 0, stream>>>(q, q_stride, n_heads, n_kv_heads, head_dim, map, kv,
                                                                    layer, scale, window, out);
  }
}

}  // namespace hetero::gpu
