// The CPU's element-wise steps against float64 references on random rows of awkward
// lengths: RMS norm (eight running double sums), rotary embedding in both pairings over a
// whole head and over part of one, and the residual add split over the threads.
#include "src/cpu/cpu_ops.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/rope.h"

namespace hetero {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(CpuOpsTest, RmsNormMatchesFloat64) {
  ThreadPool pool(2);
  const ScopedThreadPool use(&pool);
  for (const int n : {1, 7, 8, 9, 333, 576, 1001}) {
    SCOPED_TRACE(n);
    const int rows = 5;
    const std::vector<float> x = Random(static_cast<size_t>(rows) * n, 3 + n, 3.0f);
    const std::vector<float> weight = Random(n, 5 + n);
    std::vector<float> out(x.size());
    RmsNorm(x.data(), weight.data(), rows, n, 1e-5f, out.data());
    for (int r = 0; r < rows; ++r) {
      double sum = 0;
      for (int i = 0; i < n; ++i) sum += static_cast<double>(x[r * n + i]) * x[r * n + i];
      const double scale = 1.0 / std::sqrt(sum / n + 1e-5);
      for (int i = 0; i < n; ++i) {
        const double want = x[r * n + i] * scale * weight[i];
        // Float products of float-rounded scale: a few units in the last place.
        EXPECT_NEAR(out[r * n + i], want, 4e-7 * std::fabs(want) + 1e-30) << "row " << r << ", " << i;
      }
    }
  }
}

TEST(CpuOpsTest, RopeMatchesFloat64InBothPairings) {
  ThreadPool pool(2);
  const ScopedThreadPool use(&pool);
  for (const RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (const int rope_dim : {64, 24}) {  // a whole head, and part of one (partial rotary)
      SCOPED_TRACE(testing::Message() << (style == RopeStyle::kNeox ? "neox" : "normal") << " rope_dim " << rope_dim);
      ModelConfig config;
      config.head_dim = 64;
      config.rope_dim = rope_dim;
      config.rope_style = style;
      const Rope rope(config, 10000.0, 1.0, {}, 1.0f);
      const std::vector<int32_t> positions = {0, 1, 17, 999, 4093};
      const int rows = static_cast<int>(positions.size()), heads = 3;
      const std::vector<float> x = Random(static_cast<size_t>(rows) * heads * 64, 9 + rope_dim);
      std::vector<float> got = x;
      rope.Apply(got.data(), rows, heads, rope.Angles(positions.data(), rows));
      const std::vector<double> inv = RopeInverseFrequencies(rope_dim, 10000.0, 1.0);
      for (int r = 0; r < rows; ++r) {
        for (int h = 0; h < heads; ++h) {
          const size_t base = (static_cast<size_t>(r) * heads + h) * 64;
          std::vector<double> want(x.begin() + base, x.begin() + base + 64);
          for (int i = 0; i < rope_dim / 2; ++i) {
            const int a = style == RopeStyle::kNeox ? i : 2 * i;
            const int b = style == RopeStyle::kNeox ? i + rope_dim / 2 : 2 * i + 1;
            const double angle = positions[r] * inv[i];
            want[a] = x[base + a] * std::cos(angle) - x[base + b] * std::sin(angle);
            want[b] = x[base + a] * std::sin(angle) + x[base + b] * std::cos(angle);
          }
          for (int d = 0; d < 64; ++d) {
            // cos and sin rounded to float, then two float products and a sum.
            EXPECT_NEAR(got[base + d], want[d], 1e-6 * (std::fabs(x[base + d]) + 1.0)) << "row " << r << ", dim " << d;
          }
        }
      }
    }
  }
}

TEST(CpuOpsTest, AddInPlaceSplitOverThreadsAddsEveryElementOnce) {
  ThreadPool pool(2);
  const ScopedThreadPool use(&pool);
  for (const size_t n : {size_t{5}, size_t{32767}, size_t{32768}, size_t{100003}}) {
    const std::vector<float> y = Random(n, 21);
    std::vector<float> x = Random(n, 23);
    const std::vector<float> before = x;
    AddInPlace(x.data(), y.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], before[i] + y[i]) << "n " << n << ", i " << i;
  }
}

}  // namespace
}  // namespace hetero
