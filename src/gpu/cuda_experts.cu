// Mixture-of-experts feed-forward steps: the router in float32, the choice of experts per
// row on the device, and GEMVs that read each row's chosen experts out of the stacked
// expert matrices (so a step's choices never cross the bus and the pass stays one graph).
#include <cmath>

#include "src/gpu/cuda_blocks.cuh"
#include "src/gpu/cuda_kernels.cuh"

namespace hetero::gpu {
namespace {

constexpr int kWarps = 8;  // warps per block; one warp per output

__device__ __forceinline__ float Dot16(const float* w, const float* __restrict__ x) {
  const float4* xv = reinterpret_cast<const float4*>(x);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = xv[i];
    s += w[4 * i] * v.x + w[4 * i + 1] * v.y + w[4 * i + 2] * v.z + w[4 * i + 3] * v.w;
  }
  return s;
}

__global__ void RouterKernel(const float* __restrict__ h, const float* __restrict__ router, int rows, int n_embd,
                             int n_experts, float* __restrict__ logits) {
  const int lane = threadIdx.x & 31;
  const int idx = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (idx >= rows * n_experts) return;
  const int r = idx / n_experts, e = idx % n_experts;
  const float* x = h + static_cast<size_t>(r) * n_embd;
  const float* w = router + static_cast<size_t>(e) * n_embd;
  float s = 0.0f;
  for (int i = lane; i < n_embd; i += 32) s += x[i] * w[i];
  s = WarpSum(s);
  if (lane == 0) logits[idx] = s;
}

// One thread per row, as the CPU chooses: softmax probabilities (float, the sum in double),
// the `used` largest with ties to the lower id, then ascending by id.
__global__ void ChooseExpertsKernel(const float* __restrict__ logits, int rows, int n_experts, int used, bool normalize,
                                    int32_t* __restrict__ choices, float* __restrict__ weights,
                                    unsigned long long* __restrict__ counts) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* l = logits + static_cast<size_t>(r) * n_experts;
  float top = l[0];
  for (int e = 1; e < n_experts; ++e) top = fmaxf(top, l[e]);
  double sum = 0;
  for (int e = 0; e < n_experts; ++e) sum += expf(l[e] - top);
  const auto prob = [&](int e) { return static_cast<float>(expf(l[e] - top) / sum); };
  int chosen[kMaxExpertsUsed];
  float p[kMaxExpertsUsed];
  for (int k = 0; k < used; ++k) {
    int best = -1;
    float best_p = -1.0f;
    for (int e = 0; e < n_experts; ++e) {
      bool taken = false;
      for (int i = 0; i < k; ++i) taken = taken || chosen[i] == e;
      const float pe = prob(e);
      if (!taken && pe > best_p) {  // strict: an equal later id does not displace a lower one
        best = e;
        best_p = pe;
      }
    }
    chosen[k] = best;
    p[k] = best_p;
  }
  for (int i = 1; i < used; ++i) {  // ascending by id
    for (int j = i; j > 0 && chosen[j - 1] > chosen[j]; --j) {
      const int c = chosen[j];
      chosen[j] = chosen[j - 1];
      chosen[j - 1] = c;
      const float q = p[j];
      p[j] = p[j - 1];
      p[j - 1] = q;
    }
  }
  double chosen_sum = 0;
  for (int i = 0; i < used; ++i) chosen_sum += p[i];
  for (int i = 0; i < used; ++i) {
    choices[static_cast<size_t>(r) * used + i] = chosen[i];
    weights[static_cast<size_t>(r) * used + i] = normalize ? static_cast<float>(p[i] / chosen_sum) : p[i];
    // Usage statistics (EngineOptions::expert_usage_path); a NaN row chose nothing (-1).
    if (counts != nullptr && chosen[i] >= 0) atomicAdd(counts + chosen[i], 1ULL);
  }
}

// act[slot, j] = act(gate_e[j] . h[r]) * (up_e[j] . h[r]), slot = r * used + i, e = choices[slot].
template <int kFormat>
__global__ void __launch_bounds__(32 * kWarps)
    ExpertGateUpKernel(const void* gate, const void* up, const float* __restrict__ h, const int32_t* __restrict__ choices,
                       const int32_t* __restrict__ slot_of, int rows, int used, int n_ff, int n_embd, bool gelu,
                       float* __restrict__ act) {
  const int lane = threadIdx.x & 31;
  const int idx = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (idx >= rows * used * n_ff) return;
  const int j = idx % n_ff, slot = idx / n_ff, r = slot / used;
  const int chosen = choices[slot];  // -1 only from NaN logits; the host step then reports it
  const int held = chosen < 0 ? -1 : slot_of != nullptr ? slot_of[chosen] : chosen;
  if (held < 0) return;  // the host's; the down kernel skips it
  const int row = held * n_ff + j;
  const float* x = h + static_cast<size_t>(r) * n_embd;
  float g = 0.0f, u = 0.0f;
  for (int unit = lane; unit < n_embd / 16; unit += 32) {
    float w[16];
    LoadUnit<kFormat>(gate, row, n_embd, unit, w);
    g += Dot16(w, x + 16 * unit);
    LoadUnit<kFormat>(up, row, n_embd, unit, w);
    u += Dot16(w, x + 16 * unit);
  }
  g = WarpSum(g);
  u = WarpSum(u);
  if (lane == 0) act[idx] = GateActivation(g, gelu) * u;
}

// out[r, j] = sum_i weights[r, i] * (down_e[j] . act[r * used + i]), e = choices[r * used + i];
// added times `scale` with `accumulate`.
template <int kFormat>
__global__ void __launch_bounds__(32 * kWarps)
    ExpertDownKernel(const void* down, const float* __restrict__ act, const int32_t* __restrict__ choices,
                     const int32_t* __restrict__ slot_of, const float* __restrict__ weights, int rows, int used, int n_ff,
                     int n_embd, float* out, bool accumulate, float scale) {
  const int lane = threadIdx.x & 31;
  const int idx = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (idx >= rows * n_embd) return;
  const int j = idx % n_embd, r = idx / n_embd;
  float v = 0.0f;
  for (int i = 0; i < used; ++i) {
    const int slot = r * used + i;
    const int chosen = choices[slot];
    const int held = chosen < 0 ? -1 : slot_of != nullptr ? slot_of[chosen] : chosen;
    if (held < 0) continue;
    const int row = held * n_embd + j;
    const float* x = act + static_cast<size_t>(slot) * n_ff;
    float s = 0.0f;
    for (int unit = lane; unit < n_ff / 16; unit += 32) {
      float w[16];
      LoadUnit<kFormat>(down, row, n_ff, unit, w);
      s += Dot16(w, x + 16 * unit);
    }
    v += weights[slot] * s;
  }
  v = WarpSum(v);
  if (lane == 0) out[idx] = accumulate ? out[idx] + scale * v : v;
}

__global__ void AddGatedSharedKernel(const float* __restrict__ h, const float* __restrict__ gate_input,
                                     const float* __restrict__ shared, int n_embd, float scale, float* __restrict__ out) {
  const float* x = h + static_cast<size_t>(blockIdx.x) * n_embd;
  float s = 0.0f;
  for (int i = threadIdx.x; i < n_embd; i += blockDim.x) s += x[i] * gate_input[i];
  __shared__ float partial[32];
  const float share = scale / (1.0f + expf(-BlockSum(s, partial)));
  const size_t base = static_cast<size_t>(blockIdx.x) * n_embd;
  for (int i = threadIdx.x; i < n_embd; i += blockDim.x) out[base + i] += share * shared[base + i];
}

__global__ void AddScaledKernel(float* __restrict__ out, const float* __restrict__ add, size_t n, float scale) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] += scale * add[i];
}

int Blocks(size_t warps) { return static_cast<int>((warps + kWarps - 1) / kWarps); }

template <int kFormat>
void GateUp(const ExpertStep& s, cudaStream_t stream) {
  ExpertGateUpKernel<kFormat><<<Blocks(static_cast<size_t>(s.rows) * s.used * s.n_ff), 32 * kWarps, 0, stream>>>(
      s.gate, s.up, s.h, s.choices, s.slot_of, s.rows, s.used, s.n_ff, s.n_embd, s.gelu, s.act);
}

template <int kFormat>
void Down(const ExpertStep& s, cudaStream_t stream) {
  ExpertDownKernel<kFormat><<<Blocks(static_cast<size_t>(s.rows) * s.n_embd), 32 * kWarps, 0, stream>>>(
      s.down, s.act, s.choices, s.slot_of, s.weights, s.rows, s.used, s.n_ff, s.n_embd, s.out, s.accumulate, s.scale);
}

}  // namespace

cudaError_t LaunchExperts(const ExpertStep& s, cudaStream_t stream) {
  if (s.rows < 1 || s.used < 1 || s.used > kMaxExpertsUsed || s.used > s.n_experts || s.n_embd % 32 != 0 ||
      s.n_ff % 32 != 0) {
    return cudaErrorInvalidValue;
  }
  RouterKernel<<<Blocks(static_cast<size_t>(s.rows) * s.n_experts), 32 * kWarps, 0, stream>>>(
      s.h, s.router, s.rows, s.n_embd, s.n_experts, s.logits);
  ChooseExpertsKernel<<<(s.rows + 127) / 128, 128, 0, stream>>>(s.logits, s.rows, s.n_experts, s.used, s.normalize,
                                                                s.choices, s.weights, s.counts);
  if (s.gate == nullptr) {  // the device holds none of this layer's experts: the host adds them all
    if (!s.accumulate) {
      const cudaError_t e = cudaMemsetAsync(s.out, 0, static_cast<size_t>(s.rows) * s.n_embd * sizeof(float), stream);
      if (e != cudaSuccess) return e;
    }
    return cudaGetLastError();
  }
  if (!WithGemvFormat(s.gate_up_format, [&](auto f) { GateUp<decltype(f)::value>(s, stream); })) return cudaErrorInvalidValue;
  if (!WithGemvFormat(s.down_format, [&](auto f) { Down<decltype(f)::value>(s, stream); })) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

void LaunchAddScaled(float* out, const float* add, size_t n, float scale, cudaStream_t stream) {
  AddScaledKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(out, add, n, scale);
}

void LaunchAddGatedShared(const float* h, const float* gate_input, const float* shared, int rows, int n_embd, float scale,
                          float* out, cudaStream_t stream) {
  AddGatedSharedKernel<<<rows, 256, 0, stream>>>(h, gate_input, shared, n_embd, scale, out);
}

}  // namespace hetero::gpu
