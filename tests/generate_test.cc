// The one decode loop (the device worker, src/runtime/device_worker.h) with a scripted backend
// (exact control over the tokens), and Engine::Complete on it with the real model: stop
// conditions, stop strings never streamed, streaming never splitting a character,
// cancellation, seeded reproducibility, and admission waking for a session that goes idle.
#include <atomic>
#include <chrono>
#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "src/runtime/device_worker.h"
#include "src/runtime/tokenizer/utf8.h"
#include "tests/support/default_model.h"
#include "src/runtime/sampler.h"
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

  struct Options {
    int max_tokens = 128;
    SamplingParams sampling;
    std::vector<std::string> stop;
  };
  // A job continuing `prompt` on a new sequence of `backend`.
  static std::shared_ptr<GenerationJob> NewJob(Backend& backend, const std::vector<int32_t>& prompt,
                                               const Options& options) {
    auto job = std::make_shared<GenerationJob>();
    job->seq = *backend.NewSequence();
    job->prefill_tokens = prompt;
    job->history = prompt;
    job->sampler.emplace(*Sampler::Create(options.sampling));
    job->max_tokens = options.max_tokens;
    job->stop_strings = options.stop;
    return job;
  }
  // `prompt` continued on `backend` by a worker, as the engine runs every job.
  std::shared_ptr<GenerationJob> Generate(Backend& backend, const std::vector<int32_t>& prompt, const Options& options,
                                          std::function<bool(std::string_view)> on_text = nullptr) {
    DeviceWorker worker(backend, *tokenizer_, 8, 8, [](int) { return 0; });
    auto job = NewJob(backend, prompt, options);
    job->on_text = std::move(on_text);
    EXPECT_TRUE(worker.Submit(job).ok());
    worker.Wait(job);
    backend.FreeSequence(job->seq);
    return job;
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(GenerateTest, StopsAtEndOfGenerationAndMaxTokens) {
  std::vector<int32_t> script = Ids("Hello world");
  script.push_back(2);  // <|im_end|>
  script.push_back(Ids("!")[0]);
  ScriptedBackend backend(tokenizer_->vocab_size(), script);
  Options options;
  auto r = Generate(backend, Ids("Hi"), options);
  ASSERT_TRUE(r->status.ok()) << r->status;
  EXPECT_EQ(r->text, "Hello world");
  EXPECT_EQ(r->stop_reason, "end_of_generation");
  EXPECT_EQ(r->generated, Ids("Hello world"));
  ScriptedBackend again(tokenizer_->vocab_size(), script);
  options.max_tokens = 1;
  r = Generate(again, Ids("Hi"), options);
  EXPECT_EQ(r->generated.size(), 1u);
  EXPECT_EQ(r->stop_reason, "max_tokens");
}

TEST_F(GenerateTest, StopStringsAreCutAndNeverStreamed) {
  ScriptedBackend backend(tokenizer_->vocab_size(), Ids("The answer is 42.\nUser: what else?"));
  Options options;
  options.stop = {"\nUser:"};
  std::string streamed;
  auto r = Generate(backend, Ids("Q"), options, [&](std::string_view piece) {
    streamed += piece;
    return true;
  });
  ASSERT_TRUE(r->status.ok()) << r->status;
  EXPECT_EQ(r->text, "The answer is 42.");
  EXPECT_EQ(streamed, "The answer is 42.");
  EXPECT_EQ(r->stop_reason, "stop_string");
}

TEST_F(GenerateTest, StreamedPiecesAreWholeCharactersAndCancellationWorks) {
  const std::string text = "Emoji 👨‍👩‍👧 and 中文 done";
  ScriptedBackend backend(tokenizer_->vocab_size(), Ids(text));
  Options options;
  options.max_tokens = static_cast<int>(Ids(text).size());
  std::vector<std::string> pieces;
  auto r = Generate(backend, Ids("x"), options, [&](std::string_view piece) {
    pieces.emplace_back(piece);
    return true;
  });
  ASSERT_TRUE(r->status.ok()) << r->status;
  std::string joined;
  for (const std::string& p : pieces) {
    joined += p;
    EXPECT_TRUE(IsValidUtf8(p)) << "piece splits a character";
  }
  EXPECT_EQ(joined, text);
  EXPECT_LT(pieces.size(), Ids(text).size()) << "some tokens should end inside a character";
  ScriptedBackend cancel(tokenizer_->vocab_size(), Ids(text));
  int calls = 0;
  r = Generate(cancel, Ids("x"), options, [&](std::string_view) { return ++calls < 2; });
  EXPECT_THAT(r->status, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(r->stop_reason, "cancelled");
  EXPECT_EQ(calls, 2);
}

// Engine::Complete runs on the same loop: bad input is refused, seeded sampling reproduces
// itself, greedy answers the capital question, stop strings hold.
// A scripted backend with a small KV cache, most of it held by a session outside the worker.
class HeldKvBackend : public ScriptedBackend {
 public:
  HeldKvBackend(int vocab, std::vector<int32_t> script, int capacity, int held)
      : ScriptedBackend(vocab, std::move(script)), capacity_(capacity), held_(held) {}
  int kv_capacity_tokens() const override { return capacity_; }
  int kv_used_tokens() const override { return ScriptedBackend::kv_used_tokens() + held_.load(); }
  int EvictHeld() { return held_.exchange(0); }

 private:
  int capacity_;
  std::atomic<int> held_;
};

// The session holding the memory is still running when the worker first asks to evict, and
// goes idle (poking the worker) while that eviction runs: the poke must not be lost, or
// the job would wait forever for memory that is evictable now (this hung an engine test
// under ASan, about one run in thirty on a loaded machine).
TEST_F(GenerateTest, ASessionGoingIdleDuringAnEvictionWakesAdmission) {
  HeldKvBackend backend(tokenizer_->vocab_size(), Ids(" one two three"), /*capacity=*/64, /*held=*/60);
  DeviceWorker* worker_ptr = nullptr;
  std::atomic<int> evictions{0};
  DeviceWorker worker(backend, *tokenizer_, 8, 8, [&](int) {
    if (evictions++ == 0) {
      worker_ptr->Poke();  // the session's Run ends now: idle, too late for this eviction
      return 0;
    }
    return backend.EvictHeld();
  });
  worker_ptr = &worker;
  Options options;
  options.max_tokens = 3;  // with the prompt, more than the 4 tokens free
  auto job = NewJob(backend, Ids("Hello there"), options);
  ASSERT_TRUE(worker.Submit(job).ok());
  auto waited = std::async(std::launch::async, [&] { worker.Wait(job); });
  ASSERT_EQ(waited.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the worker slept through the poke (the worker's destructor cancels the job)";
  EXPECT_TRUE(job->status.ok()) << job->status;
  EXPECT_EQ(job->generated.size(), 3u);
  EXPECT_GE(evictions.load(), 2);
}

TEST_F(GenerateTest, CompleteOnTheRealModel) {
  EngineOptions engine_options;
  engine_options.threads = 1;
  engine_options.scheduler = "all-cpu";
  engine_options.measure_energy = false;
  auto engine = Engine::Create(kDefaultModelPath, engine_options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  CompletionOptions bad;
  EXPECT_THAT((*engine)->CompleteTokens({}, bad), StatusIs(absl::StatusCode::kInvalidArgument));
  bad.stop = {""};
  EXPECT_THAT((*engine)->Complete("x", bad), StatusIs(absl::StatusCode::kInvalidArgument));
  bad.stop = {};
  bad.sampling.top_p = 2.0f;
  EXPECT_THAT((*engine)->Complete("x", bad), StatusIs(absl::StatusCode::kInvalidArgument));
  bad.sampling.top_p = 1.0f;
  bad.max_tokens = 0;
  EXPECT_THAT((*engine)->Complete("x", bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*engine)->CompleteTokens({1, -3}, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*engine)->CompleteTokens({tokenizer_->vocab_size()}, {}), StatusIs(absl::StatusCode::kInvalidArgument));

  const std::string prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
  CompletionOptions greedy;
  greedy.max_tokens = 16;
  greedy.add_bos = false;
  auto answer = (*engine)->Complete(prompt, greedy);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_THAT(answer->text, ::testing::HasSubstr("Paris"));
  ASSERT_EQ(answer->report.stages.size(), 2u);
  EXPECT_EQ(answer->report.stages[1].device, Device::kCpu);
  EXPECT_EQ(answer->report.stages[1].reason, "all-cpu");
  EXPECT_EQ(answer->report.generated_tokens, static_cast<int>(answer->tokens.size()));
  EXPECT_GT(answer->report.time_to_first_token_ms, 0);
  EXPECT_EQ((*engine)->stats().kv_used_tokens, 0) << "the completion's sequence is freed";
  CompletionOptions stopped = greedy;
  stopped.stop = {"Paris"};
  auto cut = (*engine)->Complete(prompt, stopped);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->report.stop_reason, "stop_string");
  EXPECT_THAT(cut->text, ::testing::Not(::testing::HasSubstr("Paris")));
  EXPECT_EQ(answer->text.substr(0, cut->text.size()), cut->text);

  // A callback on the worker's thread may use the engine's other entry points: an embedding
  // asked from on_text runs there at once instead of waiting for its own worker.
  CompletionOptions embedding_inside = greedy;
  int embedded = 0;
  embedding_inside.on_text = [&](std::string_view) {
    if (embedded == 0) embedded = (*engine)->Embed({"inside a callback"}).ok() ? 1 : -1;
    return true;
  };
  ASSERT_TRUE((*engine)->Complete(prompt, embedding_inside).ok());
  EXPECT_EQ(embedded, 1);

  CompletionOptions sampled = greedy;
  sampled.max_tokens = 24;
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_p = 0.95f;
  sampled.sampling.seed = 7;
  auto a = (*engine)->Complete(prompt, sampled);
  auto b = (*engine)->Complete(prompt, sampled);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
}

}  // namespace
}  // namespace hetero
