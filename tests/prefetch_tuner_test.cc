// The weight prefetch tuner (src/cpu/prefetch_tuner.h) on constructed machines: each
// distance has a known read rate, scaled by drift and noise the test chooses.
#include "src/cpu/prefetch_tuner.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/quant_matmul.h"
#include "src/cpu/weight_prefetch.h"
#include "src/runtime/fp16.h"

namespace hetero::internal {
namespace {

constexpr uint64_t kMiB = 1 << 20;

PrefetchTuner::Options SmallOptions() {
  PrefetchTuner::Options o;
  o.candidates = {0, 4096, 8192, 16384};
  o.initial = 8192;
  o.block_bytes = 64 * kMiB;
  o.probe_passes = 4;
  o.settled_blocks = 40;
  o.keep_margin = 0.03;
  return o;
}

// A machine: the rate (bytes per ns) at a distance, times a factor for the n-th loop.
struct Machine {
  std::map<uint32_t, double> rate;
  std::function<double(int loop)> factor = [](int) { return 1.0; };
};

// Feeds the tuner loops of `loop_bytes` until `probes` probes have finished; returns the
// number of loops it took.
int RunUntilProbes(PrefetchTuner& tuner, const Machine& machine, int probes, uint64_t loop_bytes = 3 * kMiB,
                   int start_loop = 0) {
  int loop = start_loop;
  while (tuner.probes_finished() < probes) {
    const double r = machine.rate.at(tuner.distance()) * machine.factor(loop);
    tuner.Record(loop_bytes, static_cast<uint64_t>(static_cast<double>(loop_bytes) / r));
    if (++loop - start_loop > 1'000'000) break;  // a tuner that never finishes fails below
  }
  return loop - start_loop;
}

TEST(PrefetchTunerTest, SettlesOnTheFastestDistance) {
  for (const uint32_t fastest : {0u, 4096u, 8192u, 16384u}) {
    PrefetchTuner tuner(SmallOptions());
    Machine m{{{0, 25.0}, {4096, 25.0}, {8192, 25.0}, {16384, 25.0}}};
    m.rate[fastest] = 28.0;
    EXPECT_EQ(tuner.distance(), 0u) << "the probe starts at the first candidate";
    EXPECT_EQ(tuner.chosen(), 8192u) << "the initial distance until the probe ends";
    EXPECT_TRUE(tuner.probing());
    RunUntilProbes(tuner, m, 1);
    ASSERT_EQ(tuner.probes_finished(), 1);
    EXPECT_FALSE(tuner.probing());
    EXPECT_EQ(tuner.chosen(), fastest);
    EXPECT_EQ(tuner.distance(), fastest);
    ASSERT_EQ(tuner.probe_rates().size(), 4u);
  }
}

TEST(PrefetchTunerTest, EveryCandidateIsMeasuredOncePerPassInRotatingOrder) {
  PrefetchTuner::Options o = SmallOptions();
  o.probe_passes = 3;
  PrefetchTuner tuner(o);
  std::vector<uint32_t> order;
  uint32_t last = tuner.distance();
  order.push_back(last);
  while (tuner.probing()) {
    tuner.Record(o.block_bytes, 1000);  // one whole block per call
    if (tuner.probing()) order.push_back(tuner.distance());
  }
  const std::vector<uint32_t> expected = {0, 4096, 8192, 16384, 4096, 8192, 16384, 0, 8192, 16384, 0, 4096};
  EXPECT_EQ(order, expected);
}

TEST(PrefetchTunerTest, ADistanceChangesOnlyAtWholeBlocks) {
  PrefetchTuner tuner(SmallOptions());
  for (int i = 0; i < 63; ++i) EXPECT_EQ(tuner.Record(kMiB, 40'000), 0u) << i;  // 63 MiB of 64
  EXPECT_EQ(tuner.Record(kMiB, 40'000), 4096u);
}

TEST(PrefetchTunerTest, DriftBetweenPassesDoesNotDecide) {
  // 4096 is 5% faster than the rest. The machine's speed differs from pass to pass by up to
  // 2x, and 8192's block in the last pass (speed 1.3) runs 20% fast. Compared raw, the middle
  // two of 8192's rates are then 1.5 and 1.56 against 4096's 1.05 x (1.0, 1.3): 8192 would
  // stay. Compared within each pass, 4096 wins three passes of four.
  const double pass_speed[] = {1.0, 1.5, 0.7, 1.3};
  PrefetchTuner::Options o = SmallOptions();
  PrefetchTuner tuner(o);
  int block = 0;
  while (tuner.probing()) {
    const int pass = block / 4;
    const uint32_t d = tuner.distance();
    double rate = 20.0 * pass_speed[pass] * (d == 4096 ? 1.05 : 1.0);
    if (d == 8192 && pass == 3) rate *= 1.2;
    tuner.Record(o.block_bytes, static_cast<uint64_t>(static_cast<double>(o.block_bytes) / rate));
    ++block;
  }
  EXPECT_EQ(tuner.chosen(), 4096u);
}

TEST(PrefetchTunerTest, DuplicateCandidatesAndAnInitialOutsideThemAreHandled) {
  PrefetchTuner::Options o = SmallOptions();
  o.candidates = {0, 4096, 0, 4096};
  o.initial = 2048;
  PrefetchTuner tuner(o);
  EXPECT_EQ(tuner.candidates(), (std::vector<uint32_t>{0, 4096, 2048}));
  EXPECT_EQ(tuner.chosen(), 2048u);
  Machine m{{{0, 20.0}, {4096, 20.0}, {2048, 25.0}}};
  RunUntilProbes(tuner, m, 1);
  EXPECT_EQ(tuner.chosen(), 2048u);
  EXPECT_EQ(tuner.probe_rates().size(), 3u);
}

TEST(PrefetchTunerTest, OneStalledBlockDoesNotDecide) {
  // 16384 is 5% faster, but one of its five blocks stalls at a tenth of the speed.
  PrefetchTuner tuner(SmallOptions());
  int calls_at_16384 = 0;
  while (tuner.probing()) {
    const uint32_t d = tuner.distance();
    double rate = d == 16384 ? 21.0 : 20.0;
    if (d == 16384 && ++calls_at_16384 <= 22) rate /= 10;  // its whole first block
    tuner.Record(3 * kMiB, static_cast<uint64_t>(3.0 * kMiB / rate));
  }
  EXPECT_EQ(tuner.chosen(), 16384u);
}

TEST(PrefetchTunerTest, TheIncumbentStaysWithinTheMargin) {
  // 0 is 2% faster than the initial 8192: within the 3% margin, so 8192 stays.
  PrefetchTuner tuner(SmallOptions());
  Machine m{{{0, 20.4}, {4096, 19.0}, {8192, 20.0}, {16384, 19.0}}};
  RunUntilProbes(tuner, m, 1);
  EXPECT_EQ(tuner.chosen(), 8192u);
  // 5% is past it.
  PrefetchTuner other(SmallOptions());
  m.rate[0] = 21.0;
  RunUntilProbes(other, m, 1);
  EXPECT_EQ(other.chosen(), 0u);
}

TEST(PrefetchTunerTest, ProbesAgainAfterSettlingAndFollowsAChangedMachine) {
  PrefetchTuner::Options o = SmallOptions();
  PrefetchTuner tuner(o);
  Machine m{{{0, 30.0}, {4096, 25.0}, {8192, 25.0}, {16384, 25.0}}};
  const int first = RunUntilProbes(tuner, m, 1);
  EXPECT_EQ(tuner.chosen(), 0u);
  // Settled: the distance holds for settled_blocks blocks, whatever the machine does.
  m.rate = {{0, 20.0}, {4096, 20.0}, {8192, 20.0}, {16384, 30.0}};
  const uint64_t loop_bytes = o.block_bytes;  // one block per loop
  for (int i = 0; i < o.settled_blocks - 1; ++i) {
    EXPECT_EQ(tuner.Record(loop_bytes, static_cast<uint64_t>(loop_bytes / 20.0)), 0u) << i;
  }
  EXPECT_FALSE(tuner.probing());
  tuner.Record(loop_bytes, static_cast<uint64_t>(loop_bytes / 20.0));
  EXPECT_TRUE(tuner.probing()) << "a new probe after " << o.settled_blocks << " blocks";
  RunUntilProbes(tuner, m, 2, 3 * kMiB, first);
  EXPECT_EQ(tuner.chosen(), 16384u);
}

TEST(PrefetchTunerTest, DegenerateOptionsStillWork) {
  PrefetchTuner::Options o;
  o.candidates = {};
  o.initial = 2048;
  o.block_bytes = 0;
  o.probe_passes = 0;
  o.settled_blocks = 0;
  PrefetchTuner tuner(o);
  EXPECT_EQ(tuner.distance(), 2048u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(tuner.Record(1, 1), 2048u);
  EXPECT_GE(tuner.probes_finished(), 1);
}

// The distance moves prefetch requests only: every product's bits are the same at any.
// The group kernels are called directly (QuantMatmul would set the distance itself).
TEST(PrefetchTunerTest, KernelsGiveTheSameBitsAtEveryDistance) {
  if (std::string(QuantMatmulKernelName()) == "portable") {
    GTEST_SKIP() << "this CPU (or HETERO_CPU_ISA) has neither AVX-512 VNNI nor AVX2, and only their kernels prefetch: no distance to vary";
  }
  const bool avx512 = QuantMatmulUsesAvx512();
  std::mt19937 rng(17);
  for (const TensorType type : {TensorType::kQ4_0, TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ6_K}) {
    const TensorTypeTraits& t = GetTensorTypeTraits(type);
    const int n = 1024, k = 512, m = 2;  // 0.3-0.6 MB packed: every distance lands inside
    std::vector<uint8_t> blocks(static_cast<size_t>(n) * (k / t.block_size) * t.type_size);
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(rng());
    // Scales as small finite halves, wherever the format keeps them (the whole block is
    // random otherwise: infinities or NaNs would compare unequal to themselves).
    for (size_t off = 0; off < blocks.size(); off += t.type_size) {
      const uint16_t d = Fp32ToFp16(0.01f);
      const size_t at = type == TensorType::kQ6_K ? t.type_size - 2 : 0;
      std::memcpy(blocks.data() + off + at, &d, 2);
      if (type == TensorType::kQ4_K) std::memcpy(blocks.data() + off + 2, &d, 2);
    }
    const QuantizedWeights w = QuantizedWeights::FromBlocks(type, n, k, blocks.data());
    ASSERT_EQ(w.packed_rows, n);
    std::vector<float> x(static_cast<size_t>(m) * k);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    QuantizedActivations a;
    a.Quantize(x.data(), m, k, k);
    const bool classic = type == TensorType::kQ4_0 || type == TensorType::kQ8_0;
    std::vector<float> first;
    const uint32_t saved = weight_prefetch_bytes.load();
    for (const uint32_t distance : {0u, 4096u, 16384u, 65536u}) {
      weight_prefetch_bytes.store(distance);
      std::vector<float> y(static_cast<size_t>(m) * n);
      for (int g = 0; g < n / QuantizedWeights::kGroupRows; ++g) {
        if (classic) {
          (avx512 ? QuantGroupAvx512 : QuantGroupAvx2)(w, g, a, y.data(), n);
        } else {
          (avx512 ? QuantBlockGroupAvx512 : QuantBlockGroupAvx2)(w, g, a, y.data(), n);
        }
      }
      if (first.empty()) {
        first = y;
      } else {
        EXPECT_EQ(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)), 0)
            << TensorTypeName(type) << " at " << distance << " bytes ahead";
      }
    }
    weight_prefetch_bytes.store(saved);
  }
}

}  // namespace
}  // namespace hetero::internal
