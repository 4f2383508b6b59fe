// The built-in placement of routed experts within a GPU memory budget, on constructed sizes
// and usage statistics.
#include <gtest/gtest.h>

#include <algorithm>

#include "hetero/scheduler.h"

namespace hetero {
namespace {

ExpertPlacementFacts Facts(uint64_t budget, uint64_t fixed, int layers, int experts, uint64_t bytes_per_expert) {
  ExpertPlacementFacts f;
  f.budget_bytes = budget;
  f.fixed_bytes = fixed;
  for (int i = 0; i < layers; ++i) f.layers.push_back({2 * i + 1, experts, 2, bytes_per_expert, {}});
  return f;
}

int Resident(const ExpertPlacement& p) {
  int n = 0;
  for (const std::vector<bool>& layer : p.on_gpu) n += static_cast<int>(std::count(layer.begin(), layer.end(), true));
  return n;
}

TEST(ExpertPlacementTest, EverythingOnTheGpuWhenItFits) {
  const ExpertPlacementFacts f = Facts(/*budget=*/1000, /*fixed=*/360, 4, 8, 20);  // 360 + 640 = 1000
  absl::StatusOr<ExpertPlacement> p = PlaceExpertsWithinBudget(f);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Resident(*p), 32);
  EXPECT_NE(p->reason.find("every expert"), std::string::npos) << p->reason;
  EXPECT_EQ(*ResidentExpertBytes(f, *p), 640u);
}

TEST(ExpertPlacementTest, UniformUsageFillsWholeLayersInOrder) {
  // Room for 20 of 32 experts of 20 bytes: layers 0 and 1 whole, then 4 of layer 2.
  const ExpertPlacementFacts f = Facts(/*budget=*/1000 + 400 - 640, /*fixed=*/360, 4, 8, 20);
  absl::StatusOr<ExpertPlacement> p = PlaceExpertsWithinBudget(f);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->on_gpu.size(), 4u);
  EXPECT_EQ(p->on_gpu[0], std::vector<bool>(8, true));
  EXPECT_EQ(p->on_gpu[1], std::vector<bool>(8, true));
  EXPECT_EQ(std::count(p->on_gpu[2].begin(), p->on_gpu[2].end(), true), 4);
  EXPECT_TRUE(p->on_gpu[2][0] && p->on_gpu[2][3] && !p->on_gpu[2][4]);
  EXPECT_EQ(p->on_gpu[3], std::vector<bool>(8, false));
  EXPECT_LE(360 + *ResidentExpertBytes(f, *p), f.budget_bytes);
  EXPECT_NE(p->reason.find("20 of 32"), std::string::npos) << p->reason;
}

TEST(ExpertPlacementTest, MeasuredUsageKeepsTheMostUsedExperts) {
  ExpertPlacementFacts f = Facts(/*budget=*/360 + 4 * 20, /*fixed=*/360, 2, 4, 20);
  // Layer 0: expert 2 dominates; layer 1: experts 3 and 0. Four fit: 0.85, 0.6, 0.3, then
  // the first of the 0.05 ties in layer order.
  f.layers[0].usage = {0.05, 0.05, 0.85, 0.05};
  f.layers[1].usage = {30, 5, 5, 60};  // counts, not shares: normalised per layer
  absl::StatusOr<ExpertPlacement> p = PlaceExpertsWithinBudget(f);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->on_gpu[0], (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(p->on_gpu[1], (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(Resident(*p), 4);
}

TEST(ExpertPlacementTest, LargerExpertsCountTheirBytes) {
  // Equal usage; layer 1's experts are 4x larger, so layer 0's go first, then as many of
  // layer 1's as still fit.
  ExpertPlacementFacts f = Facts(/*budget=*/100 + 4 * 10 + 40 + 5, /*fixed=*/100, 2, 4, 10);
  f.layers[1].bytes_per_expert = 40;
  absl::StatusOr<ExpertPlacement> p = PlaceExpertsWithinBudget(f);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->on_gpu[0], std::vector<bool>(4, true));
  EXPECT_EQ(std::count(p->on_gpu[1].begin(), p->on_gpu[1].end(), true), 1);
  EXPECT_LE(100 + *ResidentExpertBytes(f, *p), f.budget_bytes);
}

TEST(ExpertPlacementTest, NoRoomForAnExpertPutsEveryRoutedExpertOnTheCpu) {
  const ExpertPlacementFacts f = Facts(/*budget=*/365, /*fixed=*/360, 3, 8, 20);
  absl::StatusOr<ExpertPlacement> p = PlaceExpertsWithinBudget(f);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Resident(*p), 0);
  EXPECT_NE(p->reason.find("routed experts on the cpu"), std::string::npos) << p->reason;
}

TEST(ExpertPlacementTest, ABudgetBelowTheFixedWeightsIsAClearError) {
  const ExpertPlacementFacts f = Facts(/*budget=*/300 << 20, /*fixed=*/360 << 20, 3, 8, 20);
  absl::StatusOr<ExpertPlacement> p = PlaceExpertsWithinBudget(f);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("300.0 MiB"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("360.0 MiB"), std::string::npos) << p.status();
}

TEST(ExpertPlacementTest, BadFactsAndMisshapenPlacementsAreRefused) {
  ExpertPlacementFacts f = Facts(1000, 100, 2, 4, 10);
  f.layers[1].usage = {1, 2};  // 2 entries for 4 experts
  EXPECT_EQ(PlaceExpertsWithinBudget(f).status().code(), absl::StatusCode::kInvalidArgument);
  f.layers[1].usage = {1, -2, 0, 0};
  EXPECT_EQ(PlaceExpertsWithinBudget(f).status().code(), absl::StatusCode::kInvalidArgument);
  f.layers[1].usage.clear();
  f.layers[0].used = 5;
  EXPECT_EQ(PlaceExpertsWithinBudget(f).status().code(), absl::StatusCode::kInvalidArgument);
  f.layers[0].used = 2;
  ExpertPlacement wrong;
  wrong.on_gpu = {std::vector<bool>(4, true)};  // one layer of two
  EXPECT_EQ(ResidentExpertBytes(f, wrong).status().code(), absl::StatusCode::kInvalidArgument);
  wrong.on_gpu.push_back(std::vector<bool>(3, true));  // three experts of four
  EXPECT_EQ(ResidentExpertBytes(f, wrong).status().code(), absl::StatusCode::kInvalidArgument);
}

// A policy plugs in through the scheduler; the default is the built-in one.
TEST(ExpertPlacementTest, SchedulersPlaceExpertsThroughTheirOwnPolicy) {
  absl::StatusOr<std::unique_ptr<Scheduler>> seed = MakeScheduler("seed");
  ASSERT_TRUE(seed.ok());
  const ExpertPlacementFacts f = Facts(360 + 3 * 20, 360, 2, 4, 20);
  absl::StatusOr<ExpertPlacement> p = (*seed)->PlaceExperts(f);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Resident(*p), 3);
}

}  // namespace
}  // namespace hetero
