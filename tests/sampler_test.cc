// Sampling: greedy, temperature distribution against the softmax it should follow, top-k,
// top-p, min-p, penalties, determinism under a seed, and parameter validation.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/sampler.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

Sampler Make(const SamplingParams& p) {
  auto s = Sampler::Create(p);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::map<int32_t, int> Histogram(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> l = logits;
    ++counts[sampler.Sample(absl::MakeSpan(l), {})];
  }
  return counts;
}

TEST(SamplerTest, GreedyTakesTheHighestLogitAndTheLowestIdOnTies) {
  Sampler s = Make({});
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.Sample(absl::MakeSpan(logits), {}), 1);
}

TEST(SamplerTest, TemperatureFollowsTheSoftmax) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 5;
  Sampler s = Make(p);
  const std::vector<float> logits = {1.0f, 0.3f, -0.4f, 0.9f, -2.0f};
  const int draws = 40000;
  const auto counts = Histogram(s, logits, draws);
  double total = 0;
  std::vector<double> probs;
  for (float l : logits) total += std::exp(l / 0.7);
  for (float l : logits) probs.push_back(std::exp(l / 0.7) / total);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double expected = probs[i] * draws;
    const double sigma = std::sqrt(draws * probs[i] * (1 - probs[i]));
    const int got = counts.count(static_cast<int32_t>(i)) ? counts.at(static_cast<int32_t>(i)) : 0;
    EXPECT_NEAR(got, expected, 5 * sigma) << "token " << i;
  }
}

TEST(SamplerTest, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  Sampler a = Make(p), b = Make(p);
  p.seed = 1235;
  Sampler c = Make(p);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l1(50), l2(50), l3(50);
    for (int j = 0; j < 50; ++j) l1[j] = l2[j] = l3[j] = std::sin(j * 0.7f + i);
    ta.push_back(a.Sample(absl::MakeSpan(l1), {}));
    tb.push_back(b.Sample(absl::MakeSpan(l2), {}));
    tc.push_back(c.Sample(absl::MakeSpan(l3), {}));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(SamplerTest, TopKTopPMinPRestrictTheCandidates) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  Sampler k = Make(p);
  EXPECT_THAT(Histogram(k, logits, 2000), ::testing::ElementsAre(::testing::Key(0), ::testing::Key(1)));
  p.top_k = 0;
  p.top_p = 0.6f;  // 0.5 alone is short of 0.6; 0.5 + 0.3 covers it
  Sampler top_p = Make(p);
  EXPECT_THAT(Histogram(top_p, logits, 2000), ::testing::ElementsAre(::testing::Key(0), ::testing::Key(1)));
  p.top_p = 1.0f;
  p.min_p = 0.25f;  // keeps p >= 0.125: the first three
  Sampler min_p = Make(p);
  EXPECT_THAT(Histogram(min_p, logits, 4000),
              ::testing::ElementsAre(::testing::Key(0), ::testing::Key(1), ::testing::Key(2)));
  p.min_p = 0.0f;
  p.top_k = 1;
  Sampler one = Make(p);
  EXPECT_THAT(Histogram(one, logits, 100), ::testing::ElementsAre(::testing::Pair(0, 100)));
}

TEST(SamplerTest, PenaltiesLowerRecentTokens) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler rep = Make(p);
  std::vector<float> logits = {3.0f, 2.0f, -1.0f};
  const std::vector<int32_t> history = {0, 2};
  EXPECT_EQ(rep.Sample(absl::MakeSpan(logits), history), 1);
  EXPECT_FLOAT_EQ(logits[0], 1.5f);   // positive: divided
  EXPECT_FLOAT_EQ(logits[2], -2.0f);  // negative: multiplied
  SamplingParams f;
  f.frequency_penalty = 0.5f;
  f.presence_penalty = 0.25f;
  f.penalty_window = 3;
  Sampler freq = Make(f);
  std::vector<float> l2 = {1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> h2 = {1, 1, 1, 0, 0, 2};  // window: {0, 0, 2}
  freq.Sample(absl::MakeSpan(l2), h2);
  EXPECT_FLOAT_EQ(l2[0], 1.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l2[1], 1.0f);  // outside the window
  EXPECT_FLOAT_EQ(l2[2], 1.0f - 0.5f - 0.25f);
}

TEST(SamplerTest, RejectsBadParameters) {
  auto with = [](auto set) {
    SamplingParams p;
    set(p);
    return Sampler::Create(p).status();
  };
  EXPECT_THAT(with([](SamplingParams& p) { p.temperature = -1; }), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("temperature")));
  EXPECT_THAT(with([](SamplingParams& p) { p.temperature = NAN; }), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(with([](SamplingParams& p) { p.top_k = -2; }), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_k")));
  EXPECT_THAT(with([](SamplingParams& p) { p.top_p = 0; }), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_p")));
  EXPECT_THAT(with([](SamplingParams& p) { p.min_p = 1; }), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_p")));
  EXPECT_THAT(with([](SamplingParams& p) { p.repetition_penalty = 0; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("repetition_penalty")));
  EXPECT_THAT(with([](SamplingParams& p) { p.penalty_window = -1; }), StatusIs(absl::StatusCode::kInvalidArgument));
}

// GreedyToken is std::max_element's index on every input: random logits of awkward sizes
// (around the 16 lanes), ties (the first wins), -0 against +0, infinities, NaNs first, in
// the middle and everywhere, and no logits at all.
TEST(GreedyTokenTest, IsTheIndexStdMaxElementReturns) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> pick(0, 9);
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(GreedyToken({}), 0);
  for (size_t n : {1, 2, 15, 16, 17, 31, 33, 100, 4099, 262144}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(n);
      for (float& v : x) {
        switch (trial % 5 == 4 ? pick(rng) : 9) {  // every fifth trial full of special values
          case 0: v = nan; break;
          case 1: v = -inf; break;
          case 2: v = inf; break;
          case 3: v = -0.0f; break;
          case 4: v = 0.0f; break;
          case 5: v = 1.5f; break;  // ties
          default: v = normal(rng);
        }
      }
      if (trial % 7 == 1) x[0] = nan;
      if (trial % 7 == 2) std::fill(x.begin(), x.end(), nan);
      if (trial % 7 == 3) std::fill(x.begin(), x.end(), -inf);
      if (trial % 7 == 4 && n > 3) x[n - 1] = x[n / 2] = 1e30f;  // a tie at the top: the first
      const int32_t expected = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
      ASSERT_EQ(GreedyToken(x), expected) << "n " << n << ", trial " << trial;
    }
  }
}

}  // namespace
}  // namespace hetero
