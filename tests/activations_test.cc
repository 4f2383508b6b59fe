// The gated activations (SiluMul, GeluTanhMul) against float64: each kernel (AVX-512 where
// the CPU has it, portable) on random gates of every length to 48 (each tail of 0 to 15
// lanes) and two long ones,
// gates far into both saturated ends, and the threaded entry points, which must give each
// element the same bits as one kernel call over the whole array.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/activation_kernels.h"
#include "src/cpu/cpu_features.h"
#include "src/cpu/cpu_ops.h"
#include "src/cpu/thread_pool.h"

namespace hetero {
namespace {

using Kernel = void (*)(float*, const float*, size_t);

double SiluReference(double g) { return g / (1.0 + std::exp(-g)); }
// 0.5 g (1 + tanh(y)) = g / (1 + e^(-2y)); the tanh form cancels even in float64 for
// g below -6 (1 + tanh(-15) keeps 3 digits), so the reference uses the other.
double GeluTanhReference(double g) {
  return g / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

struct Inputs {
  std::vector<float> gate, up;
};

Inputs RandomInputs(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> uniform(-1.5f, 1.5f);
  Inputs in{std::vector<float>(count), std::vector<float>(count)};
  for (size_t i = 0; i < count; ++i) {
    in.gate[i] = normal(rng);
    in.up[i] = uniform(rng);
  }
  // The saturated ends and the exp clamp's edges, where they fit.
  const float edges[] = {-200.0f, -100.0f, -88.0f, -87.0f, -30.0f, 30.0f, 87.0f, 88.7f, 89.0f, 200.0f, 1e-6f, -1e-6f};
  for (size_t i = 0; i < std::size(edges) && 7 * i < count; ++i) in.gate[7 * i] = edges[i];
  return in;
}

// |got - want| within rel * |want| plus an absolute floor far below any value that
// matters (silu(-200) is -3e-85; a kernel may give -0).
// GELU's exponent is computed in float (a cubic of g): its rounding, about 1e-7 of the
// exponent, is the result's relative error, so the tolerance grows with the exponent
// (50 at g = -8.3).
double GeluExponent(double g) { return 2.0 * std::sqrt(2.0 / M_PI) * std::abs(g + 0.044715 * g * g * g); }

void ExpectClose(const std::vector<float>& got, const Inputs& in, double (*reference)(double), double rel,
                 const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = reference(in.gate[i]) * in.up[i];
    const double err = std::abs(got[i] - want);
    const double exponent_rounding = reference == GeluTanhReference ? 2e-7 * GeluExponent(in.gate[i]) : 0.0;
    if (!(err <= (rel + exponent_rounding) * std::abs(want) + 1e-30) && bad++ < 5) {
      ADD_FAILURE() << what << " element " << i << " of " << got.size() << ": gate " << in.gate[i] << " up "
                    << in.up[i] << " got " << got[i] << " want " << want;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Both kernels measured at most 2.9e-7 over 4M random gates in [-90, 90]; a degree less in
// the exp polynomial would give 3.4e-6.
constexpr double kRel = 5e-7;

std::vector<size_t> Lengths() {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 48; ++n) lengths.push_back(n);
  lengths.push_back(1000);
  lengths.push_back(1537);
  return lengths;
}

struct NamedKernel {
  Kernel kernel;
  const char* name;
};

std::vector<NamedKernel> Kernels(Kernel portable, Kernel avx2, Kernel avx512) {
  std::vector<NamedKernel> kernels = {{portable, "portable"}};
  if (DetectCpu().avx2 && DetectCpu().fma) {
    kernels.push_back({avx2, "avx2"});
  } else {
    std::printf("AVX2 kernels not tested: this CPU (or HETERO_CPU_ISA) lacks avx2 or fma\n");
  }
  if (DetectCpu().avx512f) {
    kernels.push_back({avx512, "avx512"});
  } else {
    std::printf("AVX-512 kernels not tested: this CPU (or HETERO_CPU_ISA) lacks avx512f\n");
  }
  return kernels;
}

TEST(ActivationsTest, SiluMulKernelsMatchFloat64) {
  for (const NamedKernel& k : Kernels(internal::SiluMulPortable, internal::SiluMulAvx2, internal::SiluMulAvx512)) {
    for (size_t count : Lengths()) {
      const Inputs in = RandomInputs(count, static_cast<uint32_t>(count));
      std::vector<float> got = in.gate;
      k.kernel(got.data(), in.up.data(), count);
      ExpectClose(got, in, SiluReference, kRel, std::string(k.name) + " silu, " + std::to_string(count));
    }
  }
}

TEST(ActivationsTest, GeluTanhMulKernelsMatchFloat64) {
  for (const NamedKernel& k : Kernels(internal::GeluTanhMulPortable, internal::GeluTanhMulAvx2, internal::GeluTanhMulAvx512)) {
    for (size_t count : Lengths()) {
      const Inputs in = RandomInputs(count, static_cast<uint32_t>(count) + 99);
      std::vector<float> got = in.gate;
      k.kernel(got.data(), in.up.data(), count);
      ExpectClose(got, in, GeluTanhReference, kRel, std::string(k.name) + " gelu, " + std::to_string(count));
    }
  }
}

// Non-finite and extreme gates: every kernel gives what the portable one gives (NaN where it
// gives NaN, else the same value), so a model's overflow shows the same on every CPU.
TEST(ActivationsTest, KernelsAgreeOnNonFiniteAndExtremeGates) {
  const float gates[] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, -88.8f, -1e13f, 1e13f};
  const size_t count = std::size(gates);
  const std::vector<float> up(count, 1.0f);
  const Kernel kernel_sets[][3] = {{internal::SiluMulPortable, internal::SiluMulAvx2, internal::SiluMulAvx512},
                                   {internal::GeluTanhMulPortable, internal::GeluTanhMulAvx2, internal::GeluTanhMulAvx512}};
  for (const auto& [portable, avx2, avx512] : kernel_sets) {
    for (const NamedKernel& k : Kernels(portable, avx2, avx512)) {
      std::vector<float> want(gates, gates + count), got(gates, gates + count);
      portable(want.data(), up.data(), count);
      k.kernel(got.data(), up.data(), count);
      for (size_t i = 0; i < count; ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << k.name << " gate " << gates[i] << " gave " << got[i];
        } else {
          EXPECT_EQ(got[i], want[i]) << k.name << " gate " << gates[i];
        }
      }
    }
  }
}

// Long arrays run split over the threads (cpu_ops.cc): every element as one call gives it.
TEST(ActivationsTest, ThreadedEntryPointsEqualOneKernelCall) {
  const size_t count = 3 * 16384 + 5;  // above the parallel threshold, with a masked tail
  const Inputs in = RandomInputs(count, 7);
  const bool avx512 = DetectCpu().avx512f;
  const bool avx2 = DetectCpu().avx2 && DetectCpu().fma;
  ThreadPool pool(2);
  ScopedThreadPool scope(&pool);
  struct Pair {
    void (*entry)(float*, const float*, size_t);
    Kernel kernel;
    const char* name;
  };
  const Pair pairs[] = {
      {SiluMul, avx512 ? internal::SiluMulAvx512 : (avx2 ? internal::SiluMulAvx2 : internal::SiluMulPortable), "silu"},
      {GeluTanhMul,
       avx512 ? internal::GeluTanhMulAvx512 : (avx2 ? internal::GeluTanhMulAvx2 : internal::GeluTanhMulPortable),
       "gelu"},
  };
  for (const Pair& p : pairs) {
    std::vector<float> threaded = in.gate, whole = in.gate;
    p.entry(threaded.data(), in.up.data(), count);
    p.kernel(whole.data(), in.up.data(), count);
    EXPECT_EQ(threaded, whole) << p.name;
    ExpectClose(threaded, in, p.entry == SiluMul ? SiluReference : GeluTanhReference, kRel, p.name);
  }
}

}  // namespace
}  // namespace hetero
