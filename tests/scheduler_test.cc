// Scheduling policies decide on constructed system states; calibration profiles round-trip
// and bad ones are refused.
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/scheduler.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

SystemSnapshot System(bool gpu, double bandwidth = 25.0) {
  SystemSnapshot s;
  DeviceSnapshot cpu;
  cpu.device = Device::kCpu;
  cpu.available = true;
  cpu.kv_capacity_tokens = 32768;
  cpu.kv_free_tokens = 30000;
  cpu.kv_bytes_per_token = 46080;
  cpu.costs = {900, 150, 320, 40, 15};
  DeviceSnapshot g;
  g.device = Device::kGpu;
  g.available = gpu;
  g.kv_capacity_tokens = 1 << 20;
  g.kv_free_tokens = 1 << 20;
  g.kv_bytes_per_token = 46080;
  g.costs = {50000, 1500, 15000, 400, 80};
  s.devices = {cpu, g};
  s.host_device_gb_per_s = gpu ? bandwidth : 0;
  s.calibrated = true;
  return s;
}

TaskState Task(int prompt, int new_tokens) {
  TaskState t;
  t.prompt_tokens = prompt;
  t.uncached_prompt_tokens = prompt;
  t.max_new_tokens = new_tokens;
  return t;
}

Placement PlaceWith(const std::string& name, Stage stage, const TaskState& t, const SystemSnapshot& s) {
  auto scheduler = MakeScheduler(name);
  EXPECT_TRUE(scheduler.ok());
  return (*scheduler)->Place(stage, t, s);
}

TEST(SchedulerTest, FixedPolicies) {
  const SystemSnapshot s = System(true);
  const TaskState t = Task(100, 50);
  EXPECT_EQ(PlaceWith("seed", Stage::kUnderstand, t, s).device, Device::kCpu);
  EXPECT_EQ(PlaceWith("seed", Stage::kGenerate, t, s).device, Device::kGpu);
  EXPECT_EQ(PlaceWith("seed", Stage::kToolCall, t, s).device, Device::kCpu);
  EXPECT_EQ(PlaceWith("all-cpu", Stage::kGenerate, t, s).device, Device::kCpu);
  EXPECT_EQ(PlaceWith("all-gpu", Stage::kUnderstand, t, s).device, Device::kGpu);
  TaskState on_gpu = t;
  on_gpu.kv_tokens = 120;
  on_gpu.kv_device = Device::kGpu;
  EXPECT_EQ(PlaceWith("seed", Stage::kToolCall, on_gpu, s).kv_policy, KvPolicy::kSwapToHost);
  TaskState on_cpu = on_gpu;
  on_cpu.kv_device = Device::kCpu;
  EXPECT_EQ(PlaceWith("seed", Stage::kToolCall, on_cpu, s).kv_policy, KvPolicy::kKeep);
  EXPECT_THAT(MakeScheduler("fastest"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("'fastest' (accepted: seed, all-cpu, all-gpu, cost)")));
}

TEST(SchedulerTest, DeviceNamesRoundTrip) {
  for (Device d : {Device::kCpu, Device::kGpu, Device::Gpu(1), Device::Gpu(12)}) {
    auto parsed = ParseDevice(DeviceName(d));
    ASSERT_TRUE(parsed.ok()) << DeviceName(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(DeviceName(Device::Gpu(1)), "gpu:1");
  EXPECT_EQ(*ParseDevice("gpu:0"), Device::kGpu);
  for (const char* bad : {"", "GPU", "gpu:", "gpu:-1", "gpu:1x", "gpu:99999", "tpu"}) {
    EXPECT_THAT(ParseDevice(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("accepted: cpu, gpu, gpu:N")))
        << bad;
  }
}

// The CPU and two GPUs: Generate goes to the GPU holding the task's KV, else the less loaded
// one (then the one with more free KV).
TEST(SchedulerTest, TwoGpusBalanceAndKeepAffinity) {
  SystemSnapshot s = System(true);
  DeviceSnapshot second = s.devices[1];
  second.device = Device::Gpu(1);
  s.devices.push_back(second);
  TaskState t = Task(100, 50);
  for (const char* policy : {"seed", "all-gpu"}) {
    SCOPED_TRACE(policy);
    EXPECT_EQ(PlaceWith(policy, Stage::kGenerate, t, s).device, Device::kGpu) << "a tie: the first";
    s.devices[1].active_tasks = 2;
    EXPECT_EQ(PlaceWith(policy, Stage::kGenerate, t, s).device, Device::Gpu(1)) << "the less loaded";
    s.devices[1].active_tasks = 0;
    s.devices[1].kv_free_tokens -= 1000;
    EXPECT_EQ(PlaceWith(policy, Stage::kGenerate, t, s).device, Device::Gpu(1)) << "more free KV";
    TaskState held = t;
    held.kv_tokens = 200;
    held.kv_device = Device::kGpu;
    EXPECT_EQ(PlaceWith(policy, Stage::kGenerate, held, s).device, Device::kGpu) << "where its KV is";
    s.devices[1].available = false;
    EXPECT_EQ(PlaceWith(policy, Stage::kGenerate, held, s).device, Device::Gpu(1)) << "its GPU is gone";
    s.devices[1] = s.devices[2];
    s.devices[1].device = Device::kGpu;
  }
}

TEST(SchedulerTest, PlacementRules) {
  const SystemSnapshot s = System(true);
  Placement gpu;
  gpu.device = Device::kGpu;
  gpu.reason = "p";
  TaskState t = Task(10, 10);
  EXPECT_EQ(ApplyPlacementRules(Stage::kGenerate, t, s, gpu).reason, "p") << "no rule applies";
  t.small_answer = true;
  t.route = "chat";
  Placement p = ApplyPlacementRules(Stage::kGenerate, t, s, gpu);
  EXPECT_EQ(p.device, Device::kCpu);
  EXPECT_EQ(p.reason, "p; rule small-answer: route 'chat' answers briefly on the cpu");
  t.small_answer = false;
  t.out_of_memory_device = Device::kGpu;
  t.out_of_memory_message = "no room";
  p = ApplyPlacementRules(Stage::kUnderstand, t, s, gpu);
  EXPECT_EQ(p.device, Device::kCpu);
  EXPECT_EQ(p.reason, "p; rule out-of-memory: gpu out of memory (no room), re-placed on the cpu");
  Placement kept = gpu;
  kept.override_rules = true;
  EXPECT_EQ(ApplyPlacementRules(Stage::kUnderstand, t, s, kept).device, Device::kGpu) << "overridden";
  // What cannot run is moved even when overridden.
  const SystemSnapshot no_gpu = System(false);
  p = ApplyPlacementRules(Stage::kGenerate, Task(1, 1), no_gpu, kept);
  EXPECT_EQ(p.device, Device::kCpu);
  EXPECT_EQ(p.reason, "p; rule device-unavailable: gpu unavailable, cpu used");
  Placement other = gpu;
  other.device = Device::Gpu(3);
  EXPECT_THAT(ApplyPlacementRules(Stage::kGenerate, Task(1, 1), s, other).reason,
              HasSubstr("gpu:3 is not one of the engine's devices, cpu used"));
  EXPECT_THAT(ApplyPlacementRules(Stage::kEmbed, Task(1, 1), s, gpu).reason,
              HasSubstr("rule device-unavailable: gpu cannot compute embeddings, cpu used"));
  Placement swap;
  swap.device = Device::kGpu;
  swap.kv_policy = KvPolicy::kSwapToHost;
  EXPECT_EQ(ApplyPlacementRules(Stage::kToolCall, Task(1, 1), no_gpu, swap).kv_policy, KvPolicy::kKeep)
      << "KV on the cpu is already in host memory";
}

TEST(SchedulerTest, CostPicksTheFewestJoulesWithinTheLatencyTarget) {
  const SystemSnapshot with_gpu = System(true);
  // A long prompt: the GPU finishes it so much sooner that it costs fewer joules.
  EXPECT_EQ(PlaceWith("cost", Stage::kUnderstand, Task(4000, 0), with_gpu).device, Device::kGpu);
  // A short answer: on the CPU, 20 tokens take 0.13 s at 40 W (+ the idle GPU at 80 W:
  // 16 J); on the GPU 0.013 s at 400 W (+15 W idle CPU: 5.5 J). The GPU still wins on
  // joules; with the GPU unavailable the CPU is the only option.
  EXPECT_EQ(PlaceWith("cost", Stage::kGenerate, Task(10, 20), with_gpu).device, Device::kGpu);
  const SystemSnapshot cpu_only = System(false);
  const Placement p = PlaceWith("cost", Stage::kGenerate, Task(10, 20), cpu_only);
  EXPECT_EQ(p.device, Device::kCpu);
  EXPECT_THAT(p.reason, HasSubstr("J on cpu"));
  // A latency target no device meets: the fastest is chosen, and the reason says so.
  TaskState urgent = Task(10, 5000);
  urgent.latency_target_seconds = 0.5;
  const Placement fast = PlaceWith("cost", Stage::kGenerate, urgent, with_gpu);
  EXPECT_EQ(fast.device, Device::kGpu);
  EXPECT_THAT(fast.reason, HasSubstr("no device meets the latency target"));
  // With a cheap, idle CPU and a very power-hungry GPU, short work stays on the CPU.
  SystemSnapshot hungry = System(true);
  hungry.devices[1].costs.active_watts = 5000;
  hungry.devices[1].costs.idle_watts = 1;
  EXPECT_EQ(PlaceWith("cost", Stage::kGenerate, Task(10, 20), hungry).device, Device::kCpu);
}

TEST(SchedulerTest, CostChoosesTheLeastWastefulKvPolicy) {
  const SystemSnapshot s = System(true);
  TaskState t = Task(2000, 100);
  t.kv_tokens = 2000;
  t.kv_device = Device::kGpu;
  t.expected_tool_seconds = 30.0;  // a long tool: holding 92 MB for 30 s is the worst
  EXPECT_EQ(PlaceWith("cost", Stage::kToolCall, t, s).kv_policy, KvPolicy::kSwapToHost);
  t.expected_tool_seconds = 0.001;  // a tool that returns at once: keep
  EXPECT_EQ(PlaceWith("cost", Stage::kToolCall, t, s).kv_policy, KvPolicy::kKeep);
  SystemSnapshot slow_link = System(true, /*bandwidth=*/0.001);
  t.expected_tool_seconds = 30.0;  // swapping over a crawling link costs more than recomputing
  EXPECT_EQ(PlaceWith("cost", Stage::kToolCall, t, slow_link).kv_policy, KvPolicy::kDiscard);
  // KV in host memory with room to spare stays; when host KV memory is scarce and the
  // tool long, it is dropped.
  TaskState host = t;
  host.kv_device = Device::kCpu;
  EXPECT_EQ(PlaceWith("cost", Stage::kToolCall, host, s).kv_policy, KvPolicy::kKeep);
  SystemSnapshot scarce = System(false);
  scarce.devices[0].kv_free_tokens = 1000;
  EXPECT_EQ(PlaceWith("cost", Stage::kToolCall, host, scarce).kv_policy, KvPolicy::kDiscard);
}

TEST(CalibrationTest, RoundTripsAndRefusesBadProfiles) {
  Calibration c;
  c.machine = "test machine";
  c.date = "2026-11-29";
  c.host_device_gb_per_s = 12.5;
  c.devices.emplace_back(Device::kCpu, DeviceCosts{900, 150, 320, 40, 15});
  c.devices.emplace_back(Device::kGpu, DeviceCosts{50000, 1500, 15000, 400, 80});
  const std::string path = testing::WriteTempFile({}, "profile.json");
  ASSERT_TRUE(SaveCalibration(c, path).ok());
  auto loaded = LoadCalibration(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->machine, "test machine");
  EXPECT_EQ(loaded->host_device_gb_per_s, 12.5);
  ASSERT_EQ(loaded->devices.size(), 2u);
  EXPECT_EQ(loaded->devices[1].second.decode_tokens_per_s, 1500);

  auto write = [](const std::string& name, const std::string& text) {
    return testing::WriteTempFile(std::vector<uint8_t>(text.begin(), text.end()), name);
  };
  EXPECT_THAT(LoadCalibration("/no/such/profile.json"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(LoadCalibration(write("bad1.json", "{not json")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LoadCalibration(write("bad2.json", R"({"devices": {"tpu": {}}})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown device 'tpu'")));
  EXPECT_THAT(LoadCalibration(write("bad3.json", R"({"devices": {"cpu": {"prefill_tokens_per_s": -1}}})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prefill_tokens_per_s")));
}

}  // namespace
}  // namespace hetero
