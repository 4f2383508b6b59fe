// One place decides placement (src/runtime/placer.h): for every rule the engine applies to a
// policy's choice (device-unavailable, out-of-memory, prefill-handoff, embeddings placed like
// a stage; small-answer is in understand_gate_test), a custom policy that overrides it gets
// its way and the report shows its reason. And three devices, the CPU and two stand-in GPUs:
// sessions land on both GPUs, and a session's KV moves from one GPU to the other.
#include <atomic>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "src/runtime/test_hooks.h"
#include "tests/support/default_model.h"
#include "tests/support/stand_in_gpu.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::FunctionScheduler;

// A stand-in GPU that counts its work, can run out of memory on demand, and (when asked)
// computes embeddings as the CPU backend it wraps does.
class StandIn : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::atomic<int> steps{0};
  std::atomic<int> swap_ins{0};
  std::atomic<int> embeds{0};
  std::atomic<bool> out_of_memory{false};
  bool embeds_too = false;

  absl::StatusOr<SequenceId> SwapIn(const SavedSequence& saved) override {
    ++swap_ins;
    return ForwardingBackend::SwapIn(saved);
  }
  absl::Status Prefill(SequenceId seq, absl::Span<const int32_t> t, absl::Span<float> l) override {
    if (out_of_memory) return absl::ResourceExhaustedError("simulated: out of device memory");
    ++steps;
    return ForwardingBackend::Prefill(seq, t, l);
  }
  absl::Status Decode(absl::Span<const SequenceId> s, absl::Span<const int32_t> t, absl::Span<float> l) override {
    if (out_of_memory) return absl::ResourceExhaustedError("simulated: out of device memory");
    ++steps;
    return ForwardingBackend::Decode(s, t, l);
  }
  absl::Status DecodeGreedy(absl::Span<const SequenceId> s, absl::Span<const int32_t> t, absl::Span<int32_t> n) override {
    if (out_of_memory) return absl::ResourceExhaustedError("simulated: out of device memory");
    ++steps;
    return ForwardingBackend::DecodeGreedy(s, t, n);
  }
  absl::Status Step(absl::Span<const SequenceChunk> c, absl::Span<float> l) override {
    if (out_of_memory) return absl::ResourceExhaustedError("simulated: out of device memory");
    ++steps;
    return ForwardingBackend::Step(c, l);
  }
  bool can_embed() const override { return embeds_too; }
  absl::StatusOr<std::vector<std::vector<float>>> Embed(absl::Span<const std::vector<int32_t>> inputs,
                                                        EmbeddingPooling pooling, int layers) override {
    ++embeds;
    return ForwardingBackend::Embed(inputs, pooling, layers);
  }
};

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override { HETERO_SKIP_WITHOUT_DEFAULT_MODEL(); }
  void TearDown() override { internal::SetTestHooksForTesting({}); }

  // An engine with `gpus` stand-in GPUs (those in `unavailable` fail to start), placed by
  // `policy` (a built-in's name when `custom` is null).
  std::unique_ptr<Engine> MakeEngine(int gpus, std::shared_ptr<Scheduler> custom, const std::string& policy = "seed",
                                     std::vector<int> unavailable = {}) {
    internal::SetTestHooksForTesting(testing::StandInGpusHooks(&gpus_, gpus, std::move(unavailable)));
    EngineOptions o;
    o.threads = 1;
    o.kv_capacity_tokens = 4096;
    o.measure_energy = false;
    o.scheduler = policy;
    o.custom_scheduler = std::move(custom);
    auto engine = Engine::Create(kDefaultModelPath, o);
    internal::SetTestHooksForTesting({});
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  static RunOptions Greedy(int tokens) {
    RunOptions r;
    r.max_tokens = tokens;
    return r;
  }

  std::vector<StandIn*> gpus_;
};

Placement At(Device device, std::string reason, bool override_rules = false) {
  Placement p;
  p.device = device;
  p.reason = std::move(reason);
  p.override_rules = override_rules;
  return p;
}

TEST_F(PlacementTest, DeviceUnavailableRuleAndAPolicyThatChoosesAnotherGpu) {
  // GPU 0 fails to start; GPU 1 works.
  {
    auto engine = MakeEngine(2, std::make_shared<FunctionScheduler>("always-gpu0", [](Stage, const TaskState&, const SystemSnapshot&) {
      return At(Device::kGpu, "always-gpu0");
    }), "seed", {0});
    ASSERT_NE(engine, nullptr);
    const SystemSnapshot snap = engine->snapshot();
    ASSERT_EQ(snap.devices.size(), 3u);
    EXPECT_EQ(snap.devices[1].device, Device::kGpu);
    EXPECT_FALSE(snap.devices[1].available);
    EXPECT_EQ(snap.devices[1].unavailable_reason, "stand-in GPU switched off by the test");
    EXPECT_EQ(snap.devices[2].device, Device::Gpu(1));
    EXPECT_TRUE(snap.devices[2].available);
    auto session = engine->NewSession();
    auto result = (*session)->Run("Name a colour.", Greedy(4));
    ASSERT_TRUE(result.ok()) << result.status();
    for (const StageReport& s : result->report.stages) {
      EXPECT_EQ(s.device, Device::kCpu);
      EXPECT_THAT(s.reason, HasSubstr("always-gpu0; rule device-unavailable: gpu unavailable, cpu used"));
    }
  }
  {
    auto engine = MakeEngine(2, std::make_shared<FunctionScheduler>("custom", [](Stage stage, const TaskState&, const SystemSnapshot& system) {
      if (stage == Stage::kToolCall || stage == Stage::kEmbed) return At(Device::kCpu, "custom");
      const DeviceSnapshot* gpu = system.Find(Device::kGpu);
      if (gpu != nullptr && !gpu->available) return At(Device::Gpu(1), "custom: gpu is down, gpu:1 instead", true);
      return At(Device::kGpu, "custom: gpu");
    }), "seed", {0});
    ASSERT_NE(engine, nullptr);
    auto session = engine->NewSession();
    auto result = (*session)->Run("Name a colour.", Greedy(4));
    ASSERT_TRUE(result.ok()) << result.status();
    for (const StageReport& s : result->report.stages) {
      EXPECT_EQ(s.device, Device::Gpu(1));
      EXPECT_EQ(s.reason, "custom: gpu is down, gpu:1 instead");
    }
    ASSERT_NE(gpus_[1], nullptr);
    EXPECT_GT(gpus_[1]->steps.load(), 0) << "the work ran where the policy put it";
  }
}

TEST_F(PlacementTest, OutOfMemoryRuleAndAPolicyThatRetriesOnTheOtherGpu) {
  auto engine = MakeEngine(2, std::make_shared<FunctionScheduler>("custom", [](Stage stage, const TaskState& task, const SystemSnapshot&) {
    if (stage == Stage::kToolCall || stage == Stage::kEmbed) return At(Device::kCpu, "custom");
    if (task.out_of_memory_device.has_value()) {
      return At(Device::Gpu(1), absl::StrCat("custom: ", DeviceName(*task.out_of_memory_device), " is full, gpu:1"), true);
    }
    return At(Device::kGpu, "custom: gpu");
  }));
  ASSERT_NE(engine, nullptr);
  gpus_[0]->out_of_memory = true;
  auto session = engine->NewSession();
  auto result = (*session)->Run("Name a colour.", Greedy(6));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->report.stages.size(), 2u);
  for (const StageReport& s : result->report.stages) {
    EXPECT_EQ(s.device, Device::Gpu(1));
    EXPECT_EQ(s.reason, "custom: gpu is full, gpu:1");
  }
  EXPECT_GT(gpus_[1]->steps.load(), 0);
  EXPECT_EQ(result->report.generated_tokens, 6);

  // Without the override, the rule puts the retry on the CPU and says so.
  auto plain = MakeEngine(2, std::make_shared<FunctionScheduler>("plain", [](Stage, const TaskState&, const SystemSnapshot&) {
    return At(Device::kGpu, "plain");
  }));
  ASSERT_NE(plain, nullptr);
  gpus_[0]->out_of_memory = true;
  auto s2 = plain->NewSession();
  auto r2 = (*s2)->Run("Name a colour.", Greedy(6));
  ASSERT_TRUE(r2.ok()) << r2.status();
  for (const StageReport& s : r2->report.stages) {
    EXPECT_EQ(s.device, Device::kCpu);
    EXPECT_THAT(s.reason, HasSubstr("plain; rule out-of-memory: gpu out of memory (simulated: out of device memory), "
                                    "re-placed on the cpu"));
  }
}

TEST_F(PlacementTest, PrefillHandoffFollowsThePolicysTwoPlacements) {
  for (const bool split : {true, false}) {
    SCOPED_TRACE(split ? "understand on the cpu" : "understand on the gpu");
    auto engine = MakeEngine(1, std::make_shared<FunctionScheduler>("custom", [split](Stage stage, const TaskState&, const SystemSnapshot&) {
      if (stage == Stage::kUnderstand && split) return At(Device::kCpu, "custom: encode on the cpu");
      if (stage == Stage::kUnderstand || stage == Stage::kGenerate) return At(Device::kGpu, "custom: on the gpu");
      return At(Device::kCpu, "custom");
    }));
    ASSERT_NE(engine, nullptr);
    auto session = engine->NewSession();
    auto result = (*session)->Run("Explain what a prime number is.", Greedy(4));
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->report.stages.size(), 2u);
    const StageReport& understand = result->report.stages[0];
    if (split) {
      EXPECT_EQ(understand.device, Device::kCpu);
      EXPECT_THAT(understand.reason, HasSubstr("custom: encode on the cpu; rule prefill-handoff: KV handed to the gpu"));
      EXPECT_GT(gpus_[0]->swap_ins.load(), 0);
    } else {
      EXPECT_EQ(understand.device, Device::kGpu);
      EXPECT_EQ(understand.reason, "custom: on the gpu");
      EXPECT_EQ(gpus_[0]->swap_ins.load(), 0);
    }
    EXPECT_EQ(result->report.stages[1].device, Device::kGpu);
  }
}

TEST_F(PlacementTest, EmbeddingsArePlacedByThePolicy) {
  // The reference: the CPU.
  auto reference_engine = MakeEngine(0, nullptr, "all-cpu");
  ASSERT_NE(reference_engine, nullptr);
  auto reference = reference_engine->EmbedWithReport({"a short text", "another, longer text to embed"});
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(reference->report.stage, Stage::kEmbed);
  EXPECT_EQ(reference->report.device, Device::kCpu);
  EXPECT_EQ(reference->report.reason, "all-cpu");

  auto engine = MakeEngine(1, std::make_shared<FunctionScheduler>("custom", [](Stage stage, const TaskState&, const SystemSnapshot&) {
    if (stage == Stage::kEmbed) return At(Device::kGpu, "custom: embeddings on the gpu");
    return At(Device::kCpu, "custom");
  }));
  ASSERT_NE(engine, nullptr);
  // This GPU cannot embed: the rule puts the work on the CPU and says why.
  auto fallback = engine->EmbedWithReport({"a short text"});
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->report.device, Device::kCpu);
  EXPECT_THAT(fallback->report.reason,
              HasSubstr("custom: embeddings on the gpu; rule device-unavailable: gpu cannot compute embeddings"));
  EXPECT_EQ(gpus_[0]->embeds.load(), 0);
  // Now it can: the policy's choice stands, and the vectors are the CPU backend's.
  gpus_[0]->embeds_too = true;
  auto placed = engine->EmbedWithReport({"a short text", "another, longer text to embed"});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->report.device, Device::kGpu);
  EXPECT_EQ(placed->report.reason, "custom: embeddings on the gpu");
  EXPECT_EQ(gpus_[0]->embeds.load(), 1);
  EXPECT_EQ(placed->embeddings, reference->embeddings);
}

TEST_F(PlacementTest, ThreeDevicesSessionsOnBothGpusAndKvMovedBetweenThem) {
  auto engine = MakeEngine(2, nullptr, "all-gpu");
  ASSERT_NE(engine, nullptr);
  auto a = engine->NewSession();
  auto b = engine->NewSession();
  auto ra = (*a)->Run("Name a colour.", Greedy(4));
  ASSERT_TRUE(ra.ok()) << ra.status();
  auto rb = (*b)->Run("Name an animal.", Greedy(4));
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(ra->report.stages.back().device, Device::kGpu);
  EXPECT_EQ(rb->report.stages.back().device, Device::Gpu(1)) << "gpu holds a's KV; b goes to the emptier gpu:1";
  // A second turn stays where its KV is.
  auto ra2 = (*a)->Run("And another one?", Greedy(4));
  ASSERT_TRUE(ra2.ok()) << ra2.status();
  EXPECT_EQ(ra2->report.stages.back().device, Device::kGpu);
  EXPECT_GT(ra2->report.reused_prompt_tokens, 0);

  // A policy that moves each later turn to the other GPU: the KV goes along (gpu -> gpu:1
  // through host memory), is reused, and the answer is the one a single device gives.
  auto mover = MakeEngine(2, std::make_shared<FunctionScheduler>("mover", [](Stage stage, const TaskState& task, const SystemSnapshot&) {
    if (stage != Stage::kUnderstand && stage != Stage::kGenerate) return At(Device::kCpu, "mover");
    if (task.kv_tokens == 0) return At(Device::kGpu, "mover: first turn on gpu");
    return At(task.kv_device == Device::kGpu ? Device::Gpu(1) : Device::kGpu, "mover: to the other gpu");
  }));
  ASSERT_NE(mover, nullptr);
  auto m = mover->NewSession();
  auto first = (*m)->Run("Name a colour.", Greedy(4));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->report.stages.back().device, Device::kGpu);
  EXPECT_EQ(gpus_[1]->swap_ins.load(), 0);
  auto second = (*m)->Run("And another one?", Greedy(4));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->report.stages.back().device, Device::Gpu(1));
  EXPECT_EQ(second->report.stages.back().reason, "mover: to the other gpu");
  EXPECT_EQ(gpus_[1]->swap_ins.load(), 1) << "the KV moved to gpu:1";
  EXPECT_GT(second->report.reused_prompt_tokens, 0) << "and was reused there";
  EXPECT_EQ(second->text, ra2->text) << "same conversation, same greedy answer";
  EXPECT_EQ(gpus_[0]->kv_used_tokens(), 0) << "nothing left behind on gpu";
}

}  // namespace
}  // namespace hetero
