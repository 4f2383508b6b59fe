// Fault injection through the test hooks (src/runtime/test_hooks.h), on the default model:
//  - the GPU runs out of memory (a stand-in GPU backend refusing allocations or steps): the
//    task is re-placed on the CPU, completes with the same text, and says why;
//  - cancellation at every stage boundary of a task with a tool round, and mid-decode: the
//    task ends Cancelled, every KV token is released, the session works afterwards;
//  - the model file truncated and deleted after loading: the model keeps working (it was
//    copied on open); a file that changes while being read: a clear error at load.
// Each case checks the task's outcome and that KV accounting returns to where it started.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "src/cpu/cpu_backend.h"
#include "src/runtime/test_hooks.h"
#include "tests/support/default_model.h"
#include "tests/support/stand_in_gpu.h"
#include "tests/support/status_matchers.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

// Installs hooks for one test and removes them after it.
class ScopedTestHooks {
 public:
  explicit ScopedTestHooks(internal::TestHooks hooks) { internal::SetTestHooksForTesting(std::move(hooks)); }
  ~ScopedTestHooks() { internal::SetTestHooksForTesting({}); }
};

// A "GPU" that is a CPU backend which refuses allocations or steps on demand, as a device
// out of memory would.
class FaultyBackend : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::atomic<bool> fail_allocations{false};  // NewSequence, SwapIn
  std::atomic<bool> fail_steps{false};        // every forward pass
  std::atomic<int> refused{0};

  absl::StatusOr<SequenceId> NewSequence() override {
    if (fail_allocations) return Refuse();
    return ForwardingBackend::NewSequence();
  }
  absl::StatusOr<SequenceId> SwapIn(const SavedSequence& saved) override {
    if (fail_allocations) return Refuse();
    return ForwardingBackend::SwapIn(saved);
  }
  absl::Status Prefill(SequenceId seq, absl::Span<const int32_t> tokens, absl::Span<float> logits) override {
    if (fail_steps) return Refuse();
    return ForwardingBackend::Prefill(seq, tokens, logits);
  }
  absl::Status Decode(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                      absl::Span<float> logits) override {
    if (fail_steps) return Refuse();
    return ForwardingBackend::Decode(seqs, tokens, logits);
  }
  absl::Status DecodeGreedy(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                            absl::Span<int32_t> next) override {
    if (fail_steps) return Refuse();
    return ForwardingBackend::DecodeGreedy(seqs, tokens, next);
  }
  absl::Status Step(absl::Span<const SequenceChunk> chunks, absl::Span<float> logits) override {
    if (fail_steps) return Refuse();
    return ForwardingBackend::Step(chunks, logits);
  }

 private:
  absl::Status Refuse() {
    ++refused;
    return absl::ResourceExhaustedError("simulated: out of device memory");
  }
};

EngineOptions TestOptions(const std::string& scheduler = "seed") {
  EngineOptions o;
  o.threads = 1;
  o.kv_capacity_tokens = 4096;
  o.scheduler = scheduler;
  o.measure_energy = false;
  return o;
}

RunOptions Greedy(int tokens) {
  RunOptions r;
  r.max_tokens = tokens;
  return r;
}

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override { HETERO_SKIP_WITHOUT_DEFAULT_MODEL(); }

  // Hooks giving the engine a FaultyBackend as its GPU; `gpu_` points at it once created.
  internal::TestHooks FakeGpuHooks() { return testing::StandInGpuHooks(&gpu_); }
  FaultyBackend* gpu_ = nullptr;
};

std::string ReferenceAnswer(const std::string& question, int tokens) {
  auto engine = Engine::Create(kDefaultModelPath, TestOptions("all-cpu"));
  EXPECT_TRUE(engine.ok()) << engine.status();
  auto session = (*engine)->NewSession();
  auto result = (*session)->Run(question, Greedy(tokens));
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->text : "";
}

TEST_F(FaultInjectionTest, GpuOutOfMemoryReplacesTheTaskOnTheCpu) {
  const std::string question = "Name three colours.";
  const std::string expected = ReferenceAnswer(question, 12);
  ScopedTestHooks hooks(FakeGpuHooks());
  auto engine = Engine::Create(kDefaultModelPath, TestOptions("all-gpu"));
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_NE(gpu_, nullptr);
  auto session = (*engine)->NewSession();
  ASSERT_TRUE(session.ok());

  // Healthy: the stand-in GPU does the work.
  auto healthy = (*session)->Run(question, Greedy(12));
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_EQ(healthy->text, expected);
  for (const StageReport& r : healthy->report.stages) EXPECT_EQ(r.device, Device::kGpu) << r.reason;
  const int before = (*engine)->stats().kv_used_tokens;
  EXPECT_GT(before, 0);

  // Out of memory at allocation (the session's KV cannot be placed there), then at the
  // forward pass (a buffer): each time the task completes on the CPU, with the same text.
  for (std::atomic<bool>* fault : {&gpu_->fail_allocations, &gpu_->fail_steps}) {
    SCOPED_TRACE(fault == &gpu_->fail_allocations ? "allocations" : "steps");
    auto fresh = (*engine)->NewSession();
    ASSERT_TRUE(fresh.ok());
    const int refused = gpu_->refused;
    fault->store(true);
    auto result = (*fresh)->Run(question, Greedy(12));
    fault->store(false);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GT(gpu_->refused, refused);
    EXPECT_EQ(result->text, expected);
    ASSERT_EQ(result->report.stages.size(), 2u);
    for (const StageReport& r : result->report.stages) {
      EXPECT_EQ(r.device, Device::kCpu);
      EXPECT_THAT(r.reason, HasSubstr("gpu out of memory (simulated: out of device memory), re-placed on the cpu"));
    }
    fresh->reset();
    EXPECT_EQ((*engine)->stats().kv_used_tokens, before) << "the failed attempt left nothing behind";
  }
  session->reset();
  EXPECT_EQ((*engine)->stats().kv_used_tokens, 0);
  EXPECT_EQ(gpu_->kv_used_tokens(), 0);
}

// Where the hook cancels: the n-th time the task reaches (stage, begin).
struct Boundary {
  Stage stage;
  bool begin;
  int occurrence;  // 0: first round, 1: the round after the tool call
};

std::string BoundaryName(const Boundary& b) {
  return absl::StrCat(b.begin ? "before " : "after ", std::string(StageName(b.stage)), " #", b.occurrence);
}

TEST_F(FaultInjectionTest, CancellationAtEveryStageBoundaryReleasesKv) {
  std::atomic<Session*> target{nullptr};
  std::atomic<int> boundary_index{-1};
  const std::vector<Boundary> boundaries = {
      {Stage::kUnderstand, true, 0}, {Stage::kUnderstand, false, 0}, {Stage::kGenerate, true, 0},
      {Stage::kGenerate, false, 0},  {Stage::kToolCall, true, 0},    {Stage::kToolCall, false, 0},
      {Stage::kUnderstand, true, 1}, {Stage::kGenerate, false, 1}};
  std::atomic<int> seen[3][2];
  internal::TestHooks hooks = FakeGpuHooks();  // the seed policy: Understand on the CPU, Generate on the "GPU"
  hooks.stage_boundary = [&](uint64_t, Stage stage, bool begin) {
    const int index = boundary_index.load();
    if (index < 0) return;
    const int occurrence = seen[static_cast<int>(stage)][begin ? 1 : 0]++;
    const Boundary& b = boundaries[index];
    if (b.stage == stage && b.begin == begin && b.occurrence == occurrence) target.load()->Cancel();
  };
  ScopedTestHooks scoped(std::move(hooks));
  auto engine = Engine::Create(kDefaultModelPath, TestOptions("seed"));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const int start = (*engine)->stats().kv_used_tokens;

  RunOptions options = Greedy(6);
  options.max_tool_rounds = 1;
  options.tools.is_tool_call = [](const std::string&) { return true; };  // one tool round
  options.tools.run = [](const std::string&) -> absl::StatusOr<std::vector<ChatMessage>> {
    return std::vector<ChatMessage>{ChatMessage{"tool", "42", {}, "", ""}};
  };
  for (int i = 0; i < static_cast<int>(boundaries.size()); ++i) {
    SCOPED_TRACE(BoundaryName(boundaries[i]));
    auto session = (*engine)->NewSession("Be brief.");
    ASSERT_TRUE(session.ok());
    target = session->get();
    for (auto& stage : seen) stage[0] = stage[1] = 0;
    boundary_index = i;
    auto result = (*session)->Run("What is six times seven?", options);
    boundary_index = -1;
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled));
    EXPECT_EQ((*session)->kv_tokens(), 0);
    EXPECT_EQ((*engine)->stats().kv_used_tokens, start);
    EXPECT_EQ((*session)->messages().size(), 1u) << "a cancelled Run leaves the conversation as it was";
    // The session still works, then lets go of everything.
    auto again = (*session)->Run("Hi", Greedy(3));
    EXPECT_TRUE(again.ok()) << again.status();
    session->reset();
    EXPECT_EQ((*engine)->stats().kv_used_tokens, start);
  }

  // Mid-decode, on the "GPU" and after the handoff from the CPU.
  auto session = (*engine)->NewSession();
  RunOptions cancel = Greedy(64);
  cancel.ignore_end_of_generation = true;
  int pieces = 0;
  cancel.on_text = [&](std::string_view) { return ++pieces < 4; };
  EXPECT_THAT((*session)->Run("Tell me a long story.", cancel), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(pieces, 4);
  EXPECT_EQ((*engine)->stats().kv_used_tokens, start);
  EXPECT_EQ(gpu_->kv_used_tokens(), 0);
}

TEST(ModelFileFaultTest, TruncatedAndDeletedAfterLoadingChangesNothing) {
  const std::string path = testing::WriteTinyModel({}, "fault_truncate_after_load.gguf");
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuBackendOptions o;
  o.threads = 1;
  auto backend = CpuBackend::Create(**model, o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::vector<int32_t> prompt = {1, 5, 9, 3, 7};
  auto logits_of = [&](Backend& b) {
    std::vector<float> logits(b.vocab_size());
    auto seq = b.NewSequence();
    EXPECT_TRUE(seq.ok());
    EXPECT_TRUE(b.Prefill(*seq, prompt, absl::MakeSpan(logits)).ok());
    b.FreeSequence(*seq);
    return logits;
  };
  const std::vector<float> before = logits_of(**backend);

  // Truncate to a few bytes, then delete: a mapping would now fault (SIGBUS) on first touch.
  ASSERT_EQ(::truncate(path.c_str(), 16), 0);
  std::filesystem::remove(path);
  EXPECT_EQ(logits_of(**backend), before);
  CpuBackendOptions again = o;
  auto rebuilt = CpuBackend::Create(**model, again);  // reads every weight again
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(logits_of(**rebuilt), before);
  EXPECT_EQ((*rebuilt)->kv_used_tokens(), 0);
}

TEST(ModelFileFaultTest, FileChangingWhileReadIsAClearError) {
  const std::string path = testing::WriteTinyModel({}, "fault_truncate_while_read.gguf");
  const auto size = std::filesystem::file_size(path);
  std::atomic<int> reads{0};
  {
    internal::TestHooks hooks;
    hooks.model_file_read = [&](size_t, size_t) {
      if (reads++ == 0) {
        ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size / 2)), 0);
      }
    };
    ScopedTestHooks scoped(std::move(hooks));
    auto model = Model::Load(path);
    EXPECT_THAT(model, StatusIs(absl::StatusCode::kDataLoss));
    EXPECT_THAT(model.status().message(), HasSubstr(path));
    EXPECT_THAT(model.status().message(), HasSubstr("while it was being read"));
  }
  EXPECT_EQ(reads.load(), 1);
  // Truncated before loading: the GGUF checks name what is missing.
  auto truncated = Model::Load(path);
  EXPECT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(), HasSubstr(path));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hetero
