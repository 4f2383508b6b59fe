// The engine on the default model: stages and reports, scheduler fallback and custom
// policies, prefix reuse, continuous batching equal to running alone, tool calls with each
// KV policy, cancellation, deadlines and backpressure releasing everything they hold.
// Labelled "concurrency": the ThreadSanitizer build runs these.
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/devices.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

EngineOptions TestOptions() {
  EngineOptions o;
  o.threads = 1;  // ctest runs programs in parallel; one OpenMP thread each
  o.kv_capacity_tokens = 4096;
  return o;
}

RunOptions Greedy(int tokens) {
  RunOptions r;
  r.max_tokens = tokens;
  return r;
}

// A policy that records what it was asked and places everything on the CPU.
class RecordingScheduler : public Scheduler {
 public:
  explicit RecordingScheduler(KvPolicy tool_policy = KvPolicy::kKeep) : tool_policy_(tool_policy) {}
  std::string name() const override { return "recording"; }
  Placement Place(Stage stage, const TaskState& task, const SystemSnapshot& system) override {
    calls[static_cast<int>(stage)]++;
    last_gpu_available = system.Find(Device::kGpu) != nullptr && system.Find(Device::kGpu)->available;
    Placement p;
    p.device = Device::kCpu;
    p.kv_policy = tool_policy_;
    p.reason = "recorded";
    return p;
  }
  std::atomic<int> calls[3] = {0, 0, 0};
  std::atomic<bool> last_gpu_available{true};

 private:
  KvPolicy tool_policy_;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { HETERO_SKIP_WITHOUT_DEFAULT_MODEL(); }
  std::unique_ptr<Engine> Make(EngineOptions o = TestOptions()) {
    auto e = Engine::Create(kDefaultModelPath, o);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }
};

TEST_F(EngineTest, RunsTheStagesAndReportsThem) {
  // f32 reproduces the float64 reference exactly; the quantized modes may take the other
  // side of this model's near-ties (llama.cpp's CPU path answers "L'Étoile, ..." here too).
  EngineOptions o = TestOptions();
  o.cpu_precision = "f32";
  auto engine = Make(o);
  auto session = engine->NewSession();
  ASSERT_TRUE(session.ok());
  auto result = (*session)->Run("What is the capital of France?", Greedy(16));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->text, HasSubstr("Paris"));
  const TaskReport& r = result->report;
  ASSERT_EQ(r.stages.size(), 2u);
  EXPECT_EQ(r.stages[0].stage, Stage::kUnderstand);
  EXPECT_EQ(r.stages[1].stage, Stage::kGenerate);
  // The default policy wants Generate on the GPU; without one the CPU runs it, and says so.
  if (QueryDevices().cuda.available) {
    EXPECT_EQ(r.stages[1].device, Device::kGpu);
  } else {
    EXPECT_EQ(r.stages[1].device, Device::kCpu);
    EXPECT_THAT(r.stages[1].reason, HasSubstr("gpu unavailable"));
  }
  EXPECT_GT(r.prompt_tokens, 10);
  EXPECT_EQ(r.stages[0].tokens_in, r.prompt_tokens);
  EXPECT_GT(r.generated_tokens, 0);
  EXPECT_LE(r.stages[0].end_ms, r.stages[1].start_ms + 1e-6);
  EXPECT_LE(r.stages[1].start_ms, r.stages[1].end_ms);
  EXPECT_GT(r.time_to_first_token_ms, 0);
  EXPECT_EQ(r.stop_reason, "end_of_generation");
  EXPECT_EQ((*session)->messages().size(), 2u);  // user, assistant
  // The next turn reuses the KV of the first.
  auto second = (*session)->Run("And of Italy?", Greedy(12));
  ASSERT_TRUE(second.ok());
  EXPECT_GT(second->report.reused_prompt_tokens, r.prompt_tokens);
  EXPECT_LT(second->report.stages[0].tokens_in, 20);
}

TEST_F(EngineTest, ReportsEnergyPerStage) {
  // A power model file makes the expected figures exact: 20 W idle, 0 W extra while busy.
  const std::string path = ::testing::TempDir() + "/power_model.json";
  {
    std::ofstream(path) << R"({"cpu": {"idle_watts": 20, "active_watts": 0}})";
  }
  EngineOptions o = TestOptions();
  o.power_model = path;
  auto engine = Make(o);
  auto session = engine->NewSession();
  ASSERT_TRUE(session.ok());
  auto result = (*session)->Run("Say hello.", Greedy(12));
  ASSERT_TRUE(result.ok()) << result.status();
  const TaskReport& r = result->report;
  double sum = 0, covered_ms = 0;
  for (const StageReport& s : r.stages) {
    EXPECT_GE(s.joules, 0);
    EXPECT_TRUE(s.joules_estimated) << "no RAPL on the test machines: a power model";
    sum += s.joules;
    covered_ms += s.end_ms - s.start_ms;
  }
  EXPECT_NEAR(r.joules, sum, 1e-9);
  // 20 W over the stages' time (the meter samples every 20 ms and at the end).
  EXPECT_NEAR(r.joules, 20.0 * covered_ms / 1000.0, 0.01 * 20.0 * covered_ms / 1000.0 + 1e-3);
  EXPECT_TRUE(r.energy_estimated);
  EXPECT_THAT(r.energy_sources, HasSubstr("estimated"));
  EXPECT_GT(r.tokens_per_joule, 0);
  // Off: nothing is measured.
  o.measure_energy = false;
  auto quiet = Make(o);
  auto other = quiet->NewSession();
  auto unmeasured = (*other)->Run("Say hello.", Greedy(4));
  ASSERT_TRUE(unmeasured.ok());
  EXPECT_EQ(unmeasured->report.joules, -1);
  EXPECT_EQ(unmeasured->report.stages[0].joules, -1);
}

TEST_F(EngineTest, CustomSchedulerIsObeyed) {
  auto recording = std::make_shared<RecordingScheduler>();
  EngineOptions o = TestOptions();
  o.custom_scheduler = recording;
  auto engine = Make(o);
  EXPECT_EQ(engine->scheduler_name(), "recording");
  auto session = engine->NewSession();
  auto result = (*session)->Run("Hi", Greedy(4));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(recording->calls[0], 1);  // Understand
  EXPECT_EQ(recording->calls[1], 1);  // Generate
  EXPECT_FALSE(recording->last_gpu_available);
  for (const StageReport& s : result->report.stages) EXPECT_EQ(s.reason, "recorded");
}

TEST_F(EngineTest, BatchedSessionsProduceWhatEachProducesAlone) {
  const std::vector<std::string> questions = {"Name a fruit.", "What is 2 plus 2?", "Say hello in French.",
                                              "What color is the sky?", "Name a planet.", "Count to three."};
  std::vector<std::string> alone;
  {
    auto engine = Make();
    for (const std::string& q : questions) {
      auto s = engine->NewSession();
      auto r = (*s)->Run(q, Greedy(20));
      ASSERT_TRUE(r.ok()) << r.status();
      alone.push_back(r->text);
    }
  }
  EngineOptions o = TestOptions();
  o.max_batch = 8;
  auto engine = Make(o);
  std::vector<std::unique_ptr<Session>> sessions;
  for (size_t i = 0; i < questions.size(); ++i) sessions.push_back(std::move(*engine->NewSession()));
  std::vector<std::string> together(questions.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < questions.size(); ++i) {
    threads.emplace_back([&, i] {
      auto r = sessions[i]->Run(questions[i], Greedy(20));
      together[i] = r.ok() ? r->text : "error: " + std::string(r.status().message());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(together, alone);
}

TEST_F(EngineTest, CancellationAndDeadlinesReleaseKvMemory) {
  auto engine = Make();
  auto session = engine->NewSession();
  // Cancelled by the text callback after a few pieces.
  int pieces = 0;
  RunOptions cancel = Greedy(64);
  cancel.ignore_end_of_generation = true;
  cancel.on_text = [&](std::string_view) { return ++pieces < 3; };
  EXPECT_THAT((*session)->Run("Tell me a long story.", cancel), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ((*session)->kv_tokens(), 0);
  EXPECT_EQ(engine->stats().kv_used_tokens, 0);
  EXPECT_TRUE((*session)->messages().empty()) << "a failed Run leaves the conversation as it was";
  // Cancelled from another thread.
  // The other thread cancels once the reply has started (a cancel that arrived before Run
  // began would be cleared by it), so this holds however the threads are scheduled.
  RunOptions slow = Greedy(400);
  slow.ignore_end_of_generation = true;
  std::promise<void> started;
  std::atomic<bool> signalled{false};
  RunOptions slow_signalling = slow;
  slow_signalling.on_text = [&](std::string_view) {
    if (!signalled.exchange(true)) started.set_value();
    return true;
  };
  std::thread canceller([&] {
    started.get_future().wait();
    (*session)->Cancel();
  });
  EXPECT_THAT((*session)->Run("Tell me a long story.", slow_signalling), StatusIs(absl::StatusCode::kCancelled));
  if (!signalled.exchange(true)) started.set_value();  // the reply never started: free the thread
  canceller.join();
  EXPECT_EQ(engine->stats().kv_used_tokens, 0);
  // Past its deadline.
  RunOptions hurried = slow;
  hurried.timeout = std::chrono::milliseconds(50);
  EXPECT_THAT((*session)->Run("Tell me a long story.", hurried), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(engine->stats().kv_used_tokens, 0);
  // The session still works afterwards.
  EXPECT_TRUE((*session)->Run("Hi", Greedy(4)).ok());
  EXPECT_GT(engine->stats().kv_used_tokens, 0);
  session->reset();
  EXPECT_EQ(engine->stats().kv_used_tokens, 0);
}

TEST_F(EngineTest, BackpressureAnswersBusyAtTheBound) {
  EngineOptions o = TestOptions();
  o.max_queued_tasks = 1;
  o.max_batch = 1;
  o.kv_capacity_tokens = 256;  // room for about one task at a time: the rest must queue
  auto engine = Make(o);
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < 6; ++i) sessions.push_back(std::move(*engine->NewSession()));
  RunOptions r = Greedy(120);
  r.ignore_end_of_generation = true;
  std::atomic<int> busy{0}, ok{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      auto result = sessions[i]->Run("Write a poem.", r);
      if (result.ok()) {
        ++ok;
      } else if (result.status().code() == absl::StatusCode::kUnavailable) {
        EXPECT_THAT(std::string(result.status().message()), HasSubstr("busy"));
        ++busy;
      } else {
        ADD_FAILURE() << "unexpected: " << result.status();
        ++other;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(busy, 0);
  EXPECT_GT(ok, 0);
  EXPECT_EQ(other, 0);
}

TEST_F(EngineTest, IdleSessionsAreEvictedWhenKvMemoryRunsOut) {
  EngineOptions o = TestOptions();
  o.kv_capacity_tokens = 160;
  o.share_kv_prefixes = false;  // else b shares a's system-prompt blocks and fits beside it
  auto engine = Make(o);
  auto a = engine->NewSession();
  auto b = engine->NewSession();
  RunOptions long_reply = Greedy(40);
  long_reply.ignore_end_of_generation = true;
  ASSERT_TRUE((*a)->Run("Hi", long_reply).ok());
  EXPECT_GT((*a)->kv_tokens(), 60);  // prompt plus 39 fed-back tokens: most of the 160
  ASSERT_TRUE((*b)->Run("Hello there", Greedy(60)).ok());
  EXPECT_EQ((*a)->kv_tokens(), 0) << "the idle session's cache made room";
  EXPECT_GT((*b)->kv_tokens(), 0);
  // A task larger than the whole cache fails clearly instead of waiting forever.
  EXPECT_THAT((*a)->Run("Hi", Greedy(1000)), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("KV tokens")));
}

// Two conversations each hold KV while their tools run; afterwards neither continuation
// fits beside the other's cache, and only queued jobs hold memory: the worker must fail one
// (which frees its cache) rather than wait forever, and the other must then finish.
TEST_F(EngineTest, KvDeadlockBetweenQueuedConversationsFailsOneAndFinishesTheOther) {
  EngineOptions o = TestOptions();
  o.kv_capacity_tokens = 256;
  o.custom_scheduler = std::make_shared<RecordingScheduler>(KvPolicy::kKeep);
  auto engine = Make(o);
  std::unique_ptr<Session> sessions[2] = {std::move(*engine->NewSession()), std::move(*engine->NewSession())};
  std::atomic<int> in_tool{0};
  RunOptions r = Greedy(70);
  r.ignore_end_of_generation = true;
  r.max_tool_rounds = 1;
  r.tools.is_tool_call = [](const std::string&) { return true; };
  r.tools.run = [&](const std::string&) -> absl::StatusOr<std::vector<ChatMessage>> {
    // Both conversations hold their caches (about 100 tokens each) at the same time.
    ++in_tool;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (in_tool < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::vector<ChatMessage>{ChatMessage{"tool", "Sunny, 21 C.", {}, "call_1", "weather"}};
  };
  absl::Status results[2];
  std::thread threads[2];
  for (int i = 0; i < 2; ++i) {
    threads[i] = std::thread([&, i] { results[i] = sessions[i]->Run("What is the weather in Paris?", r).status(); });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(in_tool, 2);
  const int failed = results[0].ok() ? 1 : 0;
  EXPECT_TRUE(results[1 - failed].ok()) << results[1 - failed];
  EXPECT_THAT(results[failed], StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("waiting in the queue")));
  EXPECT_EQ(sessions[failed]->kv_tokens(), 0);
}

class ToolPolicyTest : public EngineTest, public ::testing::WithParamInterface<KvPolicy> {};

TEST_P(ToolPolicyTest, ToolResultsFlowBackThroughUnderstand) {
  auto recording = std::make_shared<RecordingScheduler>(GetParam());
  EngineOptions o = TestOptions();
  o.custom_scheduler = recording;
  auto engine = Make(o);
  auto session = engine->NewSession();
  RunOptions r = Greedy(12);
  int rounds = 0;
  r.tools.is_tool_call = [&](const std::string&) { return rounds++ == 0; };  // the first reply calls a tool
  r.tools.run = [](const std::string&) -> absl::StatusOr<std::vector<ChatMessage>> {
    return std::vector<ChatMessage>{ChatMessage{"tool", "The weather in Paris is sunny, 21 C.", {}, "call_1", "weather"}};
  };
  auto result = (*session)->Run("What is the weather in Paris?", r);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& stages = result->report.stages;
  ASSERT_EQ(stages.size(), 5u);  // understand, generate, tool_call, understand, generate
  EXPECT_EQ(stages[2].stage, Stage::kToolCall);
  EXPECT_EQ(stages[2].kv_policy, GetParam());
  EXPECT_EQ(stages[3].stage, Stage::kUnderstand);
  // Kept or swapped back: only the new turn is encoded; discarded: everything again.
  if (GetParam() == KvPolicy::kDiscard) {
    EXPECT_EQ(result->report.reused_prompt_tokens, 0);
  } else {
    EXPECT_GT(result->report.reused_prompt_tokens, 20);
  }
  const auto messages = (*session)->messages();
  ASSERT_EQ(messages.size(), 4u);  // user, assistant (tool call), tool, assistant
  EXPECT_EQ(messages[2].role, "tool");
  EXPECT_EQ(recording->calls[2], 1);
}

INSTANTIATE_TEST_SUITE_P(Policies, ToolPolicyTest,
                         ::testing::Values(KvPolicy::kKeep, KvPolicy::kSwapToHost, KvPolicy::kDiscard),
                         [](const auto& info) { return std::string(KvPolicyName(info.param)); });

TEST_F(EngineTest, RefusesMisuse) {
  EngineOptions bad = TestOptions();
  bad.max_batch = 0;
  EXPECT_THAT(Engine::Create(kDefaultModelPath, bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EngineOptions unknown = TestOptions();
  unknown.scheduler = "random";
  EXPECT_THAT(Engine::Create(kDefaultModelPath, unknown), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("random")));
  EngineOptions few = TestOptions();
  few.max_sessions = 1;
  auto engine = Make(few);
  auto s = engine->NewSession();
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(engine->NewSession(), StatusIs(absl::StatusCode::kResourceExhausted));
  // One Run at a time per session.
  // The second Run starts once the first has produced text, so the first is surely running.
  RunOptions slow = Greedy(200);
  slow.ignore_end_of_generation = true;
  std::promise<void> started;
  std::atomic<bool> signalled{false};
  std::atomic<bool> go_on{true};
  slow.on_text = [&](std::string_view) {
    if (!signalled.exchange(true)) started.set_value();
    return go_on.load();
  };
  std::thread runner([&] { (*s)->Run("Tell me a story.", slow).IgnoreError(); });
  EXPECT_EQ(started.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_THAT((*s)->Run("Hi", Greedy(2)), StatusIs(absl::StatusCode::kFailedPrecondition));
  go_on.store(false);  // ends the first Run at its next piece, whether or not Cancel lands first
  (*s)->Cancel();
  runner.join();
  RunOptions bad_sampling = Greedy(4);
  bad_sampling.sampling.top_p = 0;
  EXPECT_THAT((*s)->Run("Hi", bad_sampling), StatusIs(absl::StatusCode::kInvalidArgument));
  RunOptions empty_stop = Greedy(4);
  empty_stop.stop = {"\n\n", ""};  // would match at once and end every reply before it starts
  EXPECT_THAT((*s)->Run("Hi", empty_stop), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stop[1] is empty")));
  EXPECT_EQ((*s)->messages().size(), 0u) << "refused before the conversation changed";
}

}  // namespace
}  // namespace hetero
