// The scheduler: the one place that decides where each stage of a task runs, and what
// happens to a task's KV cache while it waits on a tool. Called before every stage with the
// task's state and a snapshot of the system. Built-in policies are chosen by name; users
// plug in their own by subclassing (the C ABI will add a callback adapter).
#ifndef HETERO_SCHEDULER_H_
#define HETERO_SCHEDULER_H_

#include <memory>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/export.h"

namespace hetero {

enum class Stage { kUnderstand, kGenerate, kToolCall };
enum class Device { kCpu, kGpu };

// While a task waits on a tool: keep its KV cache where it is, copy it to (pinned) host
// memory and free the device's copy, or drop it and recompute the prompt later.
enum class KvPolicy { kKeep, kSwapToHost, kDiscard };

HETERO_EXPORT std::string_view StageName(Stage stage);
HETERO_EXPORT std::string_view DeviceName(Device device);
HETERO_EXPORT std::string_view KvPolicyName(KvPolicy policy);

struct Placement {
  Device device = Device::kCpu;
  KvPolicy kv_policy = KvPolicy::kKeep;  // used for kToolCall
  std::string reason;                     // one line, for reports
};

// Measured (or default) costs of one device; see `hetero-bench --calibrate`.
struct DeviceCosts {
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;           // one sequence
  double batched_decode_tokens_per_s = 0;   // aggregate at the calibration batch size
  double active_watts = 0;
  double idle_watts = 0;
};

struct DeviceSnapshot {
  Device device = Device::kCpu;
  bool available = false;
  std::string unavailable_reason;
  int queued_tasks = 0;
  int active_tasks = 0;
  int64_t kv_capacity_tokens = 0;
  int64_t kv_free_tokens = 0;
  int64_t kv_bytes_per_token = 0;
  DeviceCosts costs;
};

struct SystemSnapshot {
  std::vector<DeviceSnapshot> devices;  // cpu first
  double host_device_gb_per_s = 0;      // transfer bandwidth, 0 without a GPU
  bool calibrated = false;              // costs measured on this machine, not defaults
  const DeviceSnapshot* Find(Device d) const {
    for (const DeviceSnapshot& s : devices) {
      if (s.device == d) return &s;
    }
    return nullptr;
  }
};

struct TaskState {
  uint64_t task_id = 0;
  int prompt_tokens = 0;        // the whole conversation as the model sees it
  int uncached_prompt_tokens = 0;  // what prefill still has to encode
  int max_new_tokens = 0;
  int generated_tokens = 0;
  int kv_tokens = 0;            // held by the task's session
  Device kv_device = Device::kCpu;
  double expected_tool_seconds = 0;  // ToolCall: the caller's estimate
  double latency_target_seconds = 0;  // 0: none
  std::string route;            // the semantic router's decision; empty without one
};

class HETERO_EXPORT Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual std::string name() const = 0;
  // Must be thread-safe: several sessions may ask at once.
  virtual Placement Place(Stage stage, const TaskState& task, const SystemSnapshot& system) = 0;
};

// "seed" (Understand and ToolCall on the CPU, Generate on the GPU), "all-cpu", "all-gpu",
// "cost" (least joules within the latency target; InferCept-style least-waste KV policy).
HETERO_EXPORT absl::StatusOr<std::unique_ptr<Scheduler>> MakeScheduler(std::string_view name);

// Measured device costs, as `hetero-bench --calibrate` writes them (JSON).
struct Calibration {
  std::vector<std::pair<Device, DeviceCosts>> devices;
  double host_device_gb_per_s = 0;
  std::string machine;  // what was measured, for the record
  std::string date;
};
HETERO_EXPORT absl::StatusOr<Calibration> LoadCalibration(const std::string& path);
HETERO_EXPORT absl::Status SaveCalibration(const Calibration& calibration, const std::string& path);
// Conservative stand-ins used when no profile is given (documented in docs/RUNTIME.md).
HETERO_EXPORT DeviceCosts DefaultCosts(Device device);

}  // namespace hetero

#endif  // HETERO_SCHEDULER_H_
