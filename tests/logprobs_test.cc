// RunOptions::logprobs on the default model: each of 100 sampled tokens' log-probability and
// its top alternatives equal the log-softmax, in float64, of the logits a separate CPU
// backend computes for the same tokens; and LogProbabilities itself against a direct
// float64 computation on random logits of awkward sizes.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/chat.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "src/cpu/cpu_backend.h"
#include "src/runtime/sampler.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

// log_softmax(logits) in float64, the reference.
std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  double max = -INFINITY;
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - max - std::log(sum);
  return out;
}

// `got` against the reference row: the chosen token's value, and the top entries are the k
// largest (allowing a swap within `tol` of a tie), each with its own value, in order.
void ExpectMatches(const TokenLogprob& got, const std::vector<double>& ref, size_t k, double tol) {
  EXPECT_NEAR(got.logprob, ref[got.token], tol) << "token " << got.token;
  ASSERT_EQ(got.top.size(), k);
  if (k == 0) return;
  std::vector<double> sorted = ref;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<double>());
  const double kth = sorted[k - 1];
  for (size_t j = 0; j < k; ++j) {
    EXPECT_NEAR(got.top[j].second, ref[got.top[j].first], tol) << "rank " << j;
    EXPECT_GE(ref[got.top[j].first], kth - tol) << "rank " << j << " is not among the " << k << " most likely";
    if (j > 0) {
      EXPECT_GE(got.top[j - 1].second, got.top[j].second) << "most likely first";
    }
  }
}

TEST(LogProbabilitiesTest, EqualsTheFloat64LogSoftmaxOnRandomLogits) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (size_t vocab : {1u, 7u, 33u, 1000u, 49157u}) {
    std::vector<float> logits(vocab);
    for (float& l : logits) l = normal(rng) + 30.0f;  // far from 0: a naive exp would lose digits
    if (vocab > 10) logits[3] = logits[5];           // a tie: the lower id ranks first
    const std::vector<double> ref = LogSoftmax(logits);
    for (int k : {0, 1, 5, 20}) {
      const size_t kept = std::min<size_t>(static_cast<size_t>(k), vocab);
      const int32_t chosen = static_cast<int32_t>(vocab / 2);
      const TokenLogprob got = LogProbabilities(logits, chosen, k);
      EXPECT_EQ(got.token, chosen);
      ExpectMatches(got, ref, kept, 1e-5);
      for (size_t j = 1; j < got.top.size(); ++j) {
        const auto& [a, la] = got.top[j - 1];
        const auto& [b, lb] = got.top[j];
        EXPECT_TRUE(logits[a] > logits[b] || (logits[a] == logits[b] && a < b)) << vocab << " " << j;
      }
    }
  }
}

TEST(LogprobsTest, EqualTheLogSoftmaxOfTheLogitsFor100Steps) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  EngineOptions o;
  o.threads = 2;
  auto engine = Engine::Create(kDefaultModelPath, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto session = (*engine)->NewSession();
  ASSERT_TRUE(session.ok());
  const std::string question = "Write a short poem about the sea.";
  RunOptions run;
  run.max_tokens = 100;
  run.ignore_end_of_generation = true;
  run.sampling.temperature = 0.9f;  // sampled: the chosen token is not always the most likely
  run.sampling.seed = 3;
  run.logprobs = 5;
  std::vector<std::pair<int32_t, float>> streamed;
  run.on_token = [&](int32_t token, float logprob) {
    streamed.emplace_back(token, logprob);
    return true;
  };
  auto result = (*session)->Run(question, run);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->logprobs.size(), 100u);
  ASSERT_EQ(streamed.size(), 100u) << "on_token sees every token, with the same values";
  for (size_t i = 0; i < streamed.size(); ++i) {
    EXPECT_EQ(streamed[i].first, result->logprobs[i].token);
    EXPECT_EQ(streamed[i].second, result->logprobs[i].logprob);
  }

  // The same tokens through a CPU backend of our own, one step at a time.
  auto model = Model::Load(kDefaultModelPath);
  ASSERT_TRUE(model.ok());
  auto tokenizer = Tokenizer::Create(**model);
  auto chat = ChatTemplate::FromModel(**model);
  ASSERT_TRUE(tokenizer.ok() && chat.ok());
  auto prompt = chat->Render({ChatMessage{"user", question}}, {}, /*add_generation_prompt=*/true);
  ASSERT_TRUE(prompt.ok());
  auto ids = (*tokenizer)->Encode(*prompt, /*add_bos=*/false, /*parse_special=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(static_cast<int>(ids->size()), result->report.prompt_tokens) << "the engine's prompt, rendered alike";
  CpuBackendOptions backend_options;
  backend_options.threads = 2;
  auto backend = CpuBackend::Create(**model, backend_options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto seq = (*backend)->NewSequence();
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits(static_cast<size_t>((*tokenizer)->vocab_size()));
  ASSERT_TRUE((*backend)->Prefill(*seq, *ids, absl::MakeSpan(logits)).ok());
  int not_top = 0;
  for (size_t i = 0; i < result->logprobs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << i);
    const TokenLogprob& step = result->logprobs[i];
    ExpectMatches(step, LogSoftmax(logits), 5, 2e-3);
    not_top += step.token != step.top[0].first;
    const int32_t token = step.token;
    ASSERT_TRUE((*backend)->Decode({&*seq, 1}, {&token, 1}, absl::MakeSpan(logits)).ok());
  }
  EXPECT_GT(not_top, 0) << "at T=0.9 some draws are not the most likely token";

  // on_token returning false cancels; without logprobs it passes 0.
  RunOptions stop_early;
  stop_early.max_tokens = 50;
  int seen = 0;
  stop_early.on_token = [&](int32_t, float logprob) {
    EXPECT_EQ(logprob, 0.0f);
    return ++seen < 3;
  };
  EXPECT_THAT((*session)->Run("Tell me a story.", stop_early), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(seen, 3);

  // Off by default; out of range refused.
  RunOptions plain;
  plain.max_tokens = 4;
  auto off = (*session)->Run("Hi", plain);
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->logprobs.empty());
  plain.logprobs = kMaxTopLogprobs + 1;
  EXPECT_THAT((*session)->Run("Hi", plain), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("logprobs is 21")));
  plain.logprobs = -2;
  EXPECT_THAT((*session)->Run("Hi", plain), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("logprobs is -2")));
}

}  // namespace
}  // namespace hetero
