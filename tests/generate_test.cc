// The generation loop with a scripted backend (exact control over the tokens) and the real
// CPU backend: stop conditions, stop strings never streamed, streaming never splitting a
// character, cancellation, and seeded reproducibility.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "src/cpu/cpu_backend.h"
#include "src/runtime/generate.h"
#include "src/runtime/tokenizer/utf8.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;

// A backend whose logits make the next token the next one of a script.
class ScriptedBackend : public Backend {
 public:
  ScriptedBackend(int vocab, std::vector<int32_t> script) : vocab_(vocab), script_(std::move(script)) {}
  const BackendInfo& info() const override { return info_; }
  int vocab_size() const override { return vocab_; }
  absl::StatusOr<SequenceId> NewSequence() override { return ++live_; }
  void FreeSequence(SequenceId) override { --live_; }
  absl::StatusOr<int> SequenceLength(SequenceId) const override { return length_; }
  absl::Status TruncateSequence(SequenceId, int) override { return absl::OkStatus(); }
  int kv_capacity_tokens() const override { return 1 << 20; }
  int kv_used_tokens() const override { return length_; }
  size_t kv_bytes_per_token() const override { return 4; }
  absl::StatusOr<SavedSequence> SwapOut(SequenceId) override { return absl::UnimplementedError("scripted"); }
  absl::StatusOr<SequenceId> SwapIn(const SavedSequence&) override { return absl::UnimplementedError("scripted"); }
  absl::Status Prefill(SequenceId, absl::Span<const int32_t> tokens, absl::Span<float> logits) override {
    length_ += static_cast<int>(tokens.size());
    Next(logits);
    return absl::OkStatus();
  }
  absl::Status Decode(absl::Span<const SequenceId>, absl::Span<const int32_t>, absl::Span<float> logits) override {
    ++length_;
    Next(logits);
    return absl::OkStatus();
  }
  absl::Status Step(absl::Span<const SequenceChunk> chunks, absl::Span<float> logits) override {
    for (const SequenceChunk& c : chunks) length_ += static_cast<int>(c.tokens.size());
    Next(logits);
    return absl::OkStatus();
  }
  int live() const { return live_; }

 private:
  void Next(absl::Span<float> logits) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    logits[step_ < script_.size() ? script_[step_] : 0] = 10.0f;
    ++step_;
  }
  BackendInfo info_;
  int vocab_;
  std::vector<int32_t> script_;
  size_t step_ = 0;
  int length_ = 0;
  int live_ = 0;
};

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
    auto m = Model::Load(kDefaultModelPath);
    ASSERT_TRUE(m.ok());
    model_ = std::move(*m);
    auto t = Tokenizer::Create(*model_);
    ASSERT_TRUE(t.ok());
    tokenizer_ = std::move(*t);
  }
  std::vector<int32_t> Ids(const std::string& text) { return *tokenizer_->Encode(text, false, false); }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(GenerateTest, StopsAtEndOfGenerationAndMaxTokens) {
  std::vector<int32_t> script = Ids("Hello world");
  script.push_back(2);  // <|im_end|>
  script.push_back(Ids("!")[0]);
  ScriptedBackend backend(tokenizer_->vocab_size(), script);
  GenerateOptions options;
  auto r = Generate(backend, *tokenizer_, Ids("Hi"), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "Hello world");
  EXPECT_EQ(r->stop_reason, "end_of_generation");
  EXPECT_EQ(r->tokens, Ids("Hello world"));
  EXPECT_EQ(backend.live(), 0) << "the sequence is freed";
  ScriptedBackend again(tokenizer_->vocab_size(), script);
  options.max_tokens = 1;
  r = Generate(again, *tokenizer_, Ids("Hi"), options);
  EXPECT_EQ(r->tokens.size(), 1u);
  EXPECT_EQ(r->stop_reason, "max_tokens");
}

TEST_F(GenerateTest, StopStringsAreCutAndNeverStreamed) {
  ScriptedBackend backend(tokenizer_->vocab_size(), Ids("The answer is 42.\nUser: what else?"));
  GenerateOptions options;
  options.stop_strings = {"\nUser:"};
  std::string streamed;
  auto r = Generate(backend, *tokenizer_, Ids("Q"), options, [&](std::string_view piece) {
    streamed += piece;
    return true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, "The answer is 42.");
  EXPECT_EQ(streamed, "The answer is 42.");
  EXPECT_EQ(r->stop_reason, "stop_string");
}

TEST_F(GenerateTest, StreamedPiecesAreWholeCharactersAndCancellationWorks) {
  const std::string text = "Emoji 👨‍👩‍👧 and 中文 done";
  ScriptedBackend backend(tokenizer_->vocab_size(), Ids(text));
  GenerateOptions options;
  options.max_tokens = static_cast<int>(Ids(text).size());
  std::vector<std::string> pieces;
  auto r = Generate(backend, *tokenizer_, Ids("x"), options, [&](std::string_view piece) {
    pieces.emplace_back(piece);
    return true;
  });
  ASSERT_TRUE(r.ok());
  std::string joined;
  for (const std::string& p : pieces) {
    joined += p;
    EXPECT_TRUE(IsValidUtf8(p)) << "piece splits a character";
  }
  EXPECT_EQ(joined, text);
  EXPECT_LT(pieces.size(), Ids(text).size()) << "some tokens should end inside a character";
  ScriptedBackend cancel(tokenizer_->vocab_size(), Ids(text));
  int calls = 0;
  r = Generate(cancel, *tokenizer_, Ids("x"), options, [&](std::string_view) { return ++calls < 2; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, "cancelled");
  EXPECT_EQ(calls, 2);
}

TEST_F(GenerateTest, RejectsBadOptions) {
  ScriptedBackend backend(tokenizer_->vocab_size(), {});
  GenerateOptions options;
  EXPECT_THAT(Generate(backend, *tokenizer_, {}, options), StatusIs(absl::StatusCode::kInvalidArgument));
  options.stop_strings = {""};
  EXPECT_THAT(Generate(backend, *tokenizer_, Ids("x"), options), StatusIs(absl::StatusCode::kInvalidArgument));
  options.stop_strings = {};
  options.sampling.top_p = 2.0f;
  EXPECT_THAT(Generate(backend, *tokenizer_, Ids("x"), options), StatusIs(absl::StatusCode::kInvalidArgument));
}

// The real model: seeded sampling reproduces itself; greedy answers the capital question.
TEST_F(GenerateTest, RealModelIsReproducibleAndSensible) {
  CpuBackendOptions backend_options;
  backend_options.threads = 1;
  auto backend = CpuBackend::Create(*model_, backend_options);
  ASSERT_TRUE(backend.ok());
  const std::vector<int32_t> prompt = *tokenizer_->Encode(
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", false, true);
  GenerateOptions greedy;
  greedy.max_tokens = 16;
  auto answer = Generate(**backend, *tokenizer_, prompt, greedy);
  ASSERT_TRUE(answer.ok());
  EXPECT_THAT(answer->text, ::testing::HasSubstr("Paris"));
  GenerateOptions sampled;
  sampled.max_tokens = 24;
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_p = 0.95f;
  sampled.sampling.seed = 7;
  auto a = Generate(**backend, *tokenizer_, prompt, sampled);
  auto b = Generate(**backend, *tokenizer_, prompt, sampled);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
}

}  // namespace
}  // namespace hetero
