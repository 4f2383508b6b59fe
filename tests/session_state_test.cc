// Session state that moves (src/runtime/session_state.h): saved from one engine and
// restored into another, the conversation goes on with the same greedy tokens as an
// uninterrupted session, and without encoding the saved tokens again; the codec refuses
// corrupt, truncated, hostile and other-model state with clear errors.
#include <cstdio>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "src/runtime/session_state.h"
#include "tests/support/default_model.h"
#include "tests/support/greedy_run.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

internal::SessionStateData SmallState() {
  internal::SessionStateData s;
  s.model.layout = KvBlockLayout{2, 1, 4, 3};
  s.model.n_vocab = 50;
  s.model.vocabulary_hash = 0x1234;
  s.messages = {{"system", "Be brief."}, {"user", "Add 2 and 3."}, {"assistant", "", {{"call_0_0", "add", "{\"a\":2,\"b\":3}"}}},
                {"tool", "5", {}, "call_0_0", "add"}, {"assistant", "5 \xE2\x9C\x93"}};
  s.generated[2] = {ToolCallFormat::kHermes, "<tool_call>{...}</tool_call>"};
  s.kv_tokens = {1, 2, 3, 4, 49};
  s.kv.resize(2 * s.model.layout.block_floats());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2, 2);
  for (float& f : s.kv) f = u(rng);
  return s;
}

TEST(SessionStateCodecTest, RoundTripsEveryField) {
  const internal::SessionStateData s = SmallState();
  const std::string bytes = internal::EncodeSessionState(s);
  auto back = internal::DecodeSessionState(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->model == s.model);
  ASSERT_EQ(back->messages.size(), s.messages.size());
  for (size_t i = 0; i < s.messages.size(); ++i) {
    EXPECT_EQ(back->messages[i].role, s.messages[i].role);
    EXPECT_EQ(back->messages[i].content, s.messages[i].content);
    EXPECT_EQ(back->messages[i].tool_call_id, s.messages[i].tool_call_id);
    EXPECT_EQ(back->messages[i].name, s.messages[i].name);
    ASSERT_EQ(back->messages[i].tool_calls.size(), s.messages[i].tool_calls.size());
    for (size_t k = 0; k < s.messages[i].tool_calls.size(); ++k) {
      EXPECT_EQ(back->messages[i].tool_calls[k].arguments_json, s.messages[i].tool_calls[k].arguments_json);
    }
  }
  ASSERT_EQ(back->generated.size(), 1u);
  EXPECT_EQ(back->generated.at(2).format, ToolCallFormat::kHermes);
  EXPECT_EQ(back->generated.at(2).text, s.generated.at(2).text);
  EXPECT_EQ(back->kv_tokens, s.kv_tokens);
  EXPECT_EQ(back->kv, s.kv);  // bit for bit
}

TEST(SessionStateCodecTest, RefusesCorruptTruncatedAndHostileState) {
  const std::string bytes = internal::EncodeSessionState(SmallState());
  // Every truncation: a clear error, never a crash.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = internal::DecodeSessionState(bytes.substr(0, n));
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << n;
  }
  // Every flipped byte: the checksum catches it.
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string flipped = bytes;
    flipped[i] ^= 0x40;
    EXPECT_THAT(internal::DecodeSessionState(flipped), StatusIs(absl::StatusCode::kInvalidArgument)) << i;
  }
  std::string corrupt = bytes;
  corrupt[bytes.size() / 2] ^= 1;
  EXPECT_THAT(internal::DecodeSessionState(corrupt), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checksum")));
  EXPECT_THAT(internal::DecodeSessionState("GGUF and more bytes here"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                                                HasSubstr("not a hetero session state")));
  // Hostile fields behind a valid checksum (the parser, not the checksum, must refuse them).
  const auto resealed = [](std::string b) {
    b.resize(b.size() - 8);
    const uint64_t sum = internal::Fnv1a64(b);
    b.append(reinterpret_cast<const char*>(&sum), 8);
    return b;
  };
  std::string version = bytes;
  version[8] = 9;
  EXPECT_THAT(internal::DecodeSessionState(resealed(version)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 9")));
  std::string huge = bytes;
  const size_t conversation_length_at = 8 + 8 + 5 * 4 + 8;
  const uint64_t claim = ~uint64_t{0};
  std::memcpy(huge.data() + conversation_length_at, &claim, 8);
  EXPECT_THAT(internal::DecodeSessionState(resealed(huge)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("conversation too long")));
  internal::SessionStateData bad_token = SmallState();
  bad_token.kv_tokens[1] = 50;
  EXPECT_THAT(internal::DecodeSessionState(internal::EncodeSessionState(bad_token)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the vocabulary")));
  internal::SessionStateData short_kv = SmallState();
  short_kv.kv.pop_back();
  EXPECT_THAT(internal::DecodeSessionState(internal::EncodeSessionState(short_kv)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("KV floats")));
  internal::SessionStateData bad_turn = SmallState();
  bad_turn.generated[99] = {ToolCallFormat::kGeneric, "x"};
  EXPECT_THAT(internal::DecodeSessionState(internal::EncodeSessionState(bad_turn)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("generated[1].message")));
  // Every format round-trips; one past the last is refused.
  internal::SessionStateData granite = SmallState();
  granite.generated[2] = {ToolCallFormat::kGranite, "<|tool_call|>[]"};
  auto granite_back = internal::DecodeSessionState(internal::EncodeSessionState(granite));
  ASSERT_TRUE(granite_back.ok()) << granite_back.status();
  EXPECT_EQ(granite_back->generated.at(2).format, ToolCallFormat::kGranite);
  internal::SessionStateData bad_format = SmallState();
  bad_format.generated[2] = {static_cast<ToolCallFormat>(static_cast<int>(ToolCallFormat::kGranite) + 1), "x"};
  EXPECT_THAT(internal::DecodeSessionState(internal::EncodeSessionState(bad_format)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a tool-call format")));
}

// The fuzz seeds were written by an independent writer (Python, from the format in
// session_state.h): they decode to what it wrote.
TEST(SessionStateCodecTest, ReadsStateAnIndependentWriterWrote) {
  std::ifstream in("tests/fuzz/corpus/session_state/conversation_with_kv", std::ios::binary);
  if (!in) GTEST_SKIP() << "run from the repository root";
  std::ostringstream bytes;
  bytes << in.rdbuf();
  auto s = internal::DecodeSessionState(bytes.str());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model.layout.n_layers, 2);
  EXPECT_EQ(s->model.layout.block_tokens, 3);
  ASSERT_EQ(s->messages.size(), 5u);
  EXPECT_EQ(s->messages[2].tool_calls.at(0).name, "add");
  EXPECT_EQ(s->messages[3].tool_call_id, "call_0_0");
  EXPECT_EQ(s->generated.at(2).format, ToolCallFormat::kHermes);
  EXPECT_EQ(s->kv_tokens, (std::vector<int32_t>{1, 2, 3, 4, 49}));
  ASSERT_EQ(s->kv.size(), 2 * s->model.layout.block_floats());
  for (size_t i = 0; i < s->kv.size(); ++i) ASSERT_EQ(s->kv[i], (i % 7) * 0.25f - 0.5f) << i;
}

class SessionStateTest : public ::testing::Test {
 protected:
  void SetUp() override { HETERO_SKIP_WITHOUT_DEFAULT_MODEL(); }
  static std::unique_ptr<Engine> MakeEngine() {
    EngineOptions o;
    o.threads = 1;
    o.scheduler = "all-cpu";
    o.measure_energy = false;
    auto engine = Engine::Create(kDefaultModelPath, o);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }
};

TEST_F(SessionStateTest, RestoredSessionContinuesWithTheSameTokensWithoutRePrefill) {
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  // Uninterrupted: two turns in one session.
  auto whole = engine->NewSession("You are a helpful assistant.");
  ASSERT_TRUE((*whole)->Run("Name three rivers.", testing::GreedyRun(16)).ok());
  auto expected = (*whole)->Run("Which of them is the longest?", testing::GreedyRun(32));
  ASSERT_TRUE(expected.ok()) << expected.status();

  // The same first turn, saved to a file, restored into another engine.
  auto first = engine->NewSession("You are a helpful assistant.");
  ASSERT_TRUE((*first)->Run("Name three rivers.", testing::GreedyRun(16)).ok());
  const int saved_tokens = (*first)->kv_tokens();
  ASSERT_GT(saved_tokens, 0);
  const std::string path = ::testing::TempDir() + "/session.state";
  ASSERT_TRUE((*first)->SaveStateToFile(path).ok());
  EXPECT_EQ((*first)->kv_tokens(), saved_tokens) << "saving keeps the session's own cache";

  auto other = MakeEngine();
  ASSERT_NE(other, nullptr);
  auto restored = other->RestoreSessionFromFile(path);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->kv_tokens(), saved_tokens);
  EXPECT_EQ((*restored)->messages().size(), (*first)->messages().size());
  auto next = (*restored)->Run("Which of them is the longest?", testing::GreedyRun(32));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(testing::GeneratedTokens(*next), testing::GeneratedTokens(*expected)) << "the next 32 greedy tokens";
  EXPECT_EQ(next->text, expected->text);
  EXPECT_EQ(next->report.reused_prompt_tokens, saved_tokens) << "no prefill of the saved tokens";
  EXPECT_EQ(next->report.stages[0].tokens_in, next->report.prompt_tokens - saved_tokens);
  std::remove(path.c_str());

  // In memory too, and state of another model's shape is refused.
  auto bytes = (*first)->SaveState();
  ASSERT_TRUE(bytes.ok());
  EXPECT_TRUE(other->RestoreSession(*bytes).ok());
  auto decoded = internal::DecodeSessionState(*bytes);
  ASSERT_TRUE(decoded.ok());
  decoded->model.vocabulary_hash ^= 1;
  EXPECT_THAT(other->RestoreSession(internal::EncodeSessionState(*decoded)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("another vocabulary")));
  decoded->model.vocabulary_hash ^= 1;
  decoded->model.layout.n_layers += 1;
  decoded->kv.resize((decoded->kv_tokens.size() + 15) / 16 * decoded->model.layout.block_floats());
  EXPECT_THAT(other->RestoreSession(internal::EncodeSessionState(*decoded)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("another model")));
  EXPECT_THAT(other->RestoreSession("nonsense"), StatusIs(absl::StatusCode::kInvalidArgument));
  decoded->model.layout.n_layers -= 1;
  decoded->kv.resize((decoded->kv_tokens.size() + 15) / 16 * decoded->model.layout.block_floats());
  decoded->kv[7] = std::nanf("");
  EXPECT_THAT(other->RestoreSession(internal::EncodeSessionState(*decoded)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("KV value 7 is not finite")));
  EXPECT_THAT(other->RestoreSessionFromFile("/no/such/state"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(other->RestoreSessionFromFile("/dev/zero"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("regular file")));
}

// State from outside stays the restored session's own: another session with the same
// conversation does not take its KV blocks from the shared-prefix cache.
TEST_F(SessionStateTest, RestoredKvIsNeverSharedWithOtherSessions) {
  auto engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const std::string system = "You are a helpful assistant. " + std::string(200, '.');
  auto first = engine->NewSession(system);
  ASSERT_TRUE((*first)->Run("Name three rivers.", testing::GreedyRun(8)).ok());
  auto state = (*first)->SaveState();
  ASSERT_TRUE(state.ok()) << state.status();
  auto fresh = MakeEngine();
  ASSERT_NE(fresh, nullptr);
  auto restored = fresh->RestoreSession(*state);
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto stranger = fresh->NewSession(system);
  auto r = (*stranger)->Run("Name three rivers.", testing::GreedyRun(4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->report.shared_prompt_tokens, 0) << "no blocks from the restored state";
  EXPECT_EQ(fresh->stats().kv_shared_tokens, 0);
}

}  // namespace
}  // namespace hetero
