// Prefix reuse on the default model: a session's next turn encodes only its new tokens,
// sessions with one long system prompt hold its KV blocks once (copy-on-write blocks in
// the paged cache), and what they answer equals an engine that shares nothing.
// Labelled "concurrency": the ThreadSanitizer build runs these.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "tests/support/default_model.h"

namespace hetero {
namespace {

EngineOptions Options(bool share) {
  EngineOptions o;
  o.threads = 1;  // ctest runs programs in parallel; one OpenMP thread each
  o.kv_capacity_tokens = 8192;
  o.scheduler = "all-cpu";  // the same device for every stage, with or without a GPU
  o.share_kv_prefixes = share;
  return o;
}

RunOptions Greedy(int tokens) {
  RunOptions r;
  r.max_tokens = tokens;
  return r;
}

// A system prompt of a bit over 500 tokens: a house style guide.
std::string LongSystemPrompt() {
  std::string s = "You are the support assistant of the Harbor Street library. Follow these rules.\n";
  for (int i = 1; i <= 24; ++i) {
    absl::StrAppend(&s, "Rule ", i, ": questions about section ", 100 + 7 * i,
                    " of the handbook get a short answer that cites the section number.\n");
  }
  return s;
}

class PrefixSharingTest : public ::testing::Test {
 protected:
  void SetUp() override { HETERO_SKIP_WITHOUT_DEFAULT_MODEL(); }
};

struct Conversation {
  std::vector<RunResult> turns;
};

// Session A asks two questions, then session B (same system prompt) one.
std::vector<Conversation> Converse(Engine& engine, int64_t* shared_after_b = nullptr, int64_t* used_after_b = nullptr,
                                   int* a_kv = nullptr, int* b_kv = nullptr) {
  const std::string system = LongSystemPrompt();
  auto a = engine.NewSession(system);
  auto b = engine.NewSession(system);
  EXPECT_TRUE(a.ok() && b.ok());
  std::vector<Conversation> out(2);
  for (const char* question : {"What does rule 3 ask for?", "And rule 4?"}) {
    auto r = (*a)->Run(question, Greedy(16));
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) out[0].turns.push_back(*r);
  }
  auto r = (*b)->Run("Which section does rule 7 cover?", Greedy(16));
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) out[1].turns.push_back(*r);
  if (shared_after_b != nullptr) *shared_after_b = engine.stats().kv_shared_tokens;
  if (used_after_b != nullptr) *used_after_b = engine.stats().kv_used_tokens;
  if (a_kv != nullptr) *a_kv = (*a)->kv_tokens();
  if (b_kv != nullptr) *b_kv = (*b)->kv_tokens();
  return out;
}

TEST_F(PrefixSharingTest, SessionsWithOneSystemPromptShareItsBlocksAndAnswerAlike) {
  auto shared_engine = Engine::Create(kDefaultModelPath, Options(true));
  auto plain_engine = Engine::Create(kDefaultModelPath, Options(false));
  ASSERT_TRUE(shared_engine.ok() && plain_engine.ok());
  int64_t shared_tokens = 0, used_tokens = 0;
  int a_kv = 0, b_kv = 0;
  const std::vector<Conversation> shared =
      Converse(**shared_engine, &shared_tokens, &used_tokens, &a_kv, &b_kv);
  int64_t plain_shared_tokens = -1, plain_used = 0;
  const std::vector<Conversation> plain = Converse(**plain_engine, &plain_shared_tokens, &plain_used);
  ASSERT_EQ(shared[0].turns.size(), 2u);
  ASSERT_EQ(shared[1].turns.size(), 1u);
  ASSERT_EQ(plain[0].turns.size(), 2u);
  ASSERT_EQ(plain[1].turns.size(), 1u);

  // Same answers, token for token, with and without sharing.
  for (int c = 0; c < 2; ++c) {
    for (size_t t = 0; t < shared[c].turns.size(); ++t) {
      EXPECT_EQ(shared[c].turns[t].text, plain[c].turns[t].text) << "conversation " << c << ", turn " << t;
      EXPECT_FALSE(shared[c].turns[t].text.empty());
    }
  }

  // A's first turn encodes everything.
  const TaskReport& a1 = shared[0].turns[0].report;
  EXPECT_GT(a1.prompt_tokens, 500);
  EXPECT_EQ(a1.reused_prompt_tokens, 0);
  EXPECT_EQ(a1.shared_prompt_tokens, 0);
  EXPECT_EQ(a1.stages[0].tokens_in, a1.prompt_tokens);
  // A's second turn encodes only its new tokens: the first turn's prompt and reply are in
  // its cache.
  const TaskReport& a2 = shared[0].turns[1].report;
  EXPECT_GE(a2.reused_prompt_tokens, a1.prompt_tokens + a1.generated_tokens - 1);
  EXPECT_EQ(a2.stages[0].tokens_in, a2.prompt_tokens - a2.reused_prompt_tokens - a2.shared_prompt_tokens);
  EXPECT_LT(a2.stages[0].tokens_in, 40);
  EXPECT_EQ(plain[0].turns[1].report.stages[0].tokens_in, a2.stages[0].tokens_in);

  // B's first turn takes the system prompt's blocks from A: every whole 16-token block of
  // the prefix the two prompts have in common (the system prompt and the user turn's
  // opening), encoding only the rest.
  const TaskReport& b1 = shared[1].turns[0].report;
  const TaskReport& plain_b1 = plain[1].turns[0].report;
  EXPECT_GE(b1.shared_prompt_tokens, 496);
  EXPECT_EQ(b1.shared_prompt_tokens % 16, 0);
  EXPECT_EQ(b1.stages[0].tokens_in, b1.prompt_tokens - b1.shared_prompt_tokens);
  EXPECT_EQ(plain_b1.shared_prompt_tokens, 0);
  EXPECT_EQ(plain_b1.stages[0].tokens_in, plain_b1.prompt_tokens);
  EXPECT_EQ(b1.prompt_tokens, plain_b1.prompt_tokens);

  // KV accounting: the shared blocks are held once.
  EXPECT_EQ(shared_tokens, b1.shared_prompt_tokens);
  EXPECT_EQ(used_tokens, a_kv + b_kv - shared_tokens);
  EXPECT_EQ(plain_shared_tokens, 0);
  EXPECT_EQ(plain_used, a_kv + b_kv);
  EXPECT_GE((*shared_engine)->stats().kv_prefix_hit_tokens, b1.shared_prompt_tokens);
  // Sessions gone: nothing held, the system prompt's blocks cached for the next one.
  const EngineStats after = (*shared_engine)->stats();
  EXPECT_EQ(after.kv_used_tokens, 0);
  EXPECT_EQ(after.kv_shared_tokens, 0);
  EXPECT_GE(after.kv_cached_tokens, 496);
  auto c = (*shared_engine)->NewSession(LongSystemPrompt());
  ASSERT_TRUE(c.ok());
  auto c1 = (*c)->Run("Which section does rule 7 cover?", Greedy(16));
  ASSERT_TRUE(c1.ok()) << c1.status();
  EXPECT_GE(c1->report.shared_prompt_tokens, 496);
  EXPECT_EQ(c1->text, shared[1].turns[0].text);
}

// Sessions with one system prompt running at once, from several threads: each answers as
// it does alone on an engine without sharing, and the cache is empty afterwards.
TEST_F(PrefixSharingTest, ConcurrentSessionsAnswerAsAlone) {
  const std::vector<std::string> questions = {"What does rule 2 ask for?", "Which section does rule 9 cover?",
                                              "Summarize rule 12 in one line."};
  std::vector<std::string> alone(questions.size());
  {
    auto plain = Engine::Create(kDefaultModelPath, Options(false));
    ASSERT_TRUE(plain.ok());
    for (size_t i = 0; i < questions.size(); ++i) {
      auto s = (*plain)->NewSession(LongSystemPrompt());
      ASSERT_TRUE(s.ok());
      auto r = (*s)->Run(questions[i], Greedy(12));
      ASSERT_TRUE(r.ok()) << r.status();
      alone[i] = r->text;
    }
  }
  auto engine = Engine::Create(kDefaultModelPath, Options(true));
  ASSERT_TRUE(engine.ok());
  std::vector<std::string> together(questions.size());
  std::vector<int> shared(questions.size(), 0);
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < questions.size(); ++i) {
      threads.emplace_back([&, i] {
        auto s = (*engine)->NewSession(LongSystemPrompt());
        if (!s.ok()) return;
        auto r = (*s)->Run(questions[i], Greedy(12));
        if (!r.ok()) return;
        together[i] = r->text;
        shared[i] = r->report.shared_prompt_tokens;
      });
    }
    for (std::thread& t : threads) t.join();
  }
  for (size_t i = 0; i < questions.size(); ++i) EXPECT_EQ(together[i], alone[i]) << questions[i];
  const EngineStats stats = (*engine)->stats();
  EXPECT_EQ(stats.kv_used_tokens, 0);
  EXPECT_EQ(stats.kv_shared_tokens, 0);
  // How much was shared depends on timing (a session that encodes while another does
  // shares nothing), so only the sum of hits is checked against the reports.
  int64_t reported = 0;
  for (int s : shared) reported += s;
  EXPECT_EQ(stats.kv_prefix_hit_tokens, reported);
}

}  // namespace
}  // namespace hetero
