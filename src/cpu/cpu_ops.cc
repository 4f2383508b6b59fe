#include "src/cpu/cpu_ops.h"

#include <cassert>
#include <cmath>

#include "src/cpu/activation_kernels.h"
#include "src/cpu/cpu_features.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/rope.h"

namespace hetero {

void RmsNorm(const float* x, const float* weight, int rows, int n, float eps, float* out) {
  ParallelFor(rows, ThreadPool::Schedule::kStatic, [&](int r) {
    const float* xr = x + static_cast<size_t>(r) * n;
    float* o = out + static_cast<size_t>(r) * n;
    // Double: the mean square of thousands of values. Eight running sums in a fixed order
    // (the compiler vectorises them) instead of one chain of dependent adds, which took
    // ~5% of a prompt pass of the default model.
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int u = 0; u < 8; ++u) part[u] += static_cast<double>(xr[i + u]) * xr[i + u];
    }
    for (; i < n; ++i) part[i % 8] += static_cast<double>(xr[i]) * xr[i];
    const double sum = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / n + eps));
    for (int i = 0; i < n; ++i) o[i] = xr[i] * scale * weight[i];
  });
}

Rope::Rope(const ModelConfig& config, double base, double linear_factor, const std::vector<float>& freq_factors,
           float attn_factor)
    : head_dim_(config.head_dim), rope_dim_(config.rope_dim), neox_(config.rope_style == RopeStyle::kNeox),
      attn_factor_(attn_factor), inv_freq_(RopeInverseFrequencies(config.rope_dim, base, linear_factor, freq_factors)) {}

RopeAngles Rope::Angles(const int32_t* positions, int rows) const {
  const int half = rope_dim_ / 2;
  RopeAngles a;
  a.cos.resize(static_cast<size_t>(rows) * half);
  a.sin.resize(static_cast<size_t>(rows) * half);
  ParallelFor(rows, ThreadPool::Schedule::kStatic, [&](int r) {
    for (int i = 0; i < half; ++i) {
      const double angle = positions[r] * inv_freq_[i];
      a.cos[static_cast<size_t>(r) * half + i] = static_cast<float>(std::cos(angle)) * attn_factor_;
      a.sin[static_cast<size_t>(r) * half + i] = static_cast<float>(std::sin(angle)) * attn_factor_;
    }
  });
  return a;
}

void Rope::Apply(float* x, int rows, int heads, const RopeAngles& angles) const {
  const int half = rope_dim_ / 2;
  assert(angles.cos.size() == static_cast<size_t>(rows) * half);
  ParallelFor(rows, ThreadPool::Schedule::kStatic, [&](int r) {
    const float* cos_t = angles.cos.data() + static_cast<size_t>(r) * half;
    const float* sin_t = angles.sin.data() + static_cast<size_t>(r) * half;
    // One loop per pairing, so that each vectorises (the pair's indices no longer branch).
    for (int h = 0; h < heads; ++h) {
      float* v = x + (static_cast<size_t>(r) * heads + h) * head_dim_;
      if (neox_) {
        for (int i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * cos_t[i] - x1 * sin_t[i];
          v[i + half] = x0 * sin_t[i] + x1 * cos_t[i];
        }
      } else {
        for (int i = 0; i < half; ++i) {
          const float x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
          v[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
        }
      }
    }
  });
}

namespace internal {

void SiluMulPortable(float* gate, const float* up, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void GeluTanhMulPortable(float* gate, const float* up, size_t count) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.7978845608028654f;
  for (size_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-kTwoSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

}  // namespace internal

namespace {

// Runs `kernel` over the array, split over the threads from `parallel_from` values: below
// that the kernel takes less time than a fork-join (the vector kernels up to ~16k values, a
// batch's; the scalar exp loop up to ~4k, a decode step's 1536 but not a batch's).
using GatedKernel = void (*)(float*, const float*, size_t);
struct GatedKernels {
  GatedKernel avx512, avx2, portable;
};
void GatedActivation(float* gate, const float* up, size_t count, const GatedKernels& kernels) {
  static const bool avx512 = DetectCpu().avx512f;
  static const bool avx2 = DetectCpu().avx2 && DetectCpu().fma;
  const size_t parallel_from = avx512 || avx2 ? 16384 : 4096;
  const auto kernel = avx512 ? kernels.avx512 : (avx2 ? kernels.avx2 : kernels.portable);
  if (count < parallel_from) {
    kernel(gate, up, count);
  } else {
    ParallelForRanges(count, [&](size_t begin, size_t end) { kernel(gate + begin, up + begin, end - begin); });
  }
}

}  // namespace

void SiluMul(float* gate, const float* up, size_t count) {
  GatedActivation(gate, up, count, {internal::SiluMulAvx512, internal::SiluMulAvx2, internal::SiluMulPortable});
}

void GeluTanhMul(float* gate, const float* up, size_t count) {
  GatedActivation(gate, up, count,
                  {internal::GeluTanhMulAvx512, internal::GeluTanhMulAvx2, internal::GeluTanhMulPortable});
}

void AddInPlace(float* x, const float* y, size_t count) {
  // A prompt's residual adds (rows x width floats) split over the threads; a decode step's
  // few thousand take less time than a fork-join.
  const auto add = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) x[i] += y[i];
  };
  if (count < 32768) {
    add(0, count);
  } else {
    ParallelForRanges(count, add);
  }
}

void AddScaledInPlace(float* x, const float* y, float scale, size_t count) {
  for (size_t i = 0; i < count; ++i) x[i] += scale * y[i];
}

void ScaleInPlace(float* x, float scale, size_t count) {
  for (size_t i = 0; i < count; ++i) x[i] *= scale;
}

}  // namespace hetero
