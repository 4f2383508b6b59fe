// The scheduler: the one place that decides where each stage of a task runs, and what
// happens to a task's KV cache while it waits on a tool. Called before every stage with the
// task's state and a snapshot of the system. Built-in policies are chosen by name; users
// plug in their own by subclassing (the C ABI will add a callback adapter).
#ifndef HETERO_SCHEDULER_H_
#define HETERO_SCHEDULER_H_

#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/export.h"

namespace hetero {

// kEmbed: Engine::Embed's forward passes (no Generate follows).
enum class Stage { kUnderstand, kGenerate, kToolCall, kEmbed };

enum class DeviceKind { kCpu, kGpu };

// A compute device of the engine: its kind and its ordinal among devices of that kind (GPU 0,
// GPU 1, ...). The engine's devices come from its registry (Engine::devices(), the snapshot);
// Device::kGpu is the first GPU.
struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int ordinal = 0;
  static const Device kCpu;
  static const Device kGpu;
  static constexpr Device Gpu(int ordinal) { return Device{DeviceKind::kGpu, ordinal}; }
  bool is_gpu() const { return kind == DeviceKind::kGpu; }
  friend constexpr auto operator<=>(const Device&, const Device&) = default;
};
inline constexpr Device Device::kCpu{DeviceKind::kCpu, 0};
inline constexpr Device Device::kGpu{DeviceKind::kGpu, 0};

// While a task waits on a tool: keep its KV cache where it is, copy it to (pinned) host
// memory and free the device's copy, or drop it and recompute the prompt later.
enum class KvPolicy { kKeep, kSwapToHost, kDiscard };

HETERO_EXPORT std::string_view StageName(Stage stage);
// "cpu", "gpu" (the first GPU), "gpu:1", "gpu:2", ...
HETERO_EXPORT std::string DeviceName(Device device);
// The inverse of DeviceName ("gpu:0" is accepted for the first GPU); InvalidArgument lists
// the accepted forms.
HETERO_EXPORT absl::StatusOr<Device> ParseDevice(std::string_view name);
HETERO_EXPORT std::string_view KvPolicyName(KvPolicy policy);

struct Placement {
  Device device = Device::kCpu;
  KvPolicy kv_policy = KvPolicy::kKeep;  // used for kToolCall
  std::string reason;                     // one line, for reports
  // The engine applies the placement rules (ApplyPlacementRules below) to every policy's
  // choice; a policy that has weighed the facts the rules act on (TaskState::small_answer,
  // ::out_of_memory_device, a device's availability) sets this to keep its own choice. Only
  // what cannot run at all is still changed: a device that is unavailable or cannot run the
  // stage (rule "device-unavailable").
  bool override_rules = false;
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
  std::string name;               // the backend's description, e.g. "cpu (Intel Xeon, 2 threads)"
  bool available = false;
  std::string unavailable_reason;
  bool can_embed = false;         // runs Stage::kEmbed (Engine::Embed)
  bool can_apply_adapters = false;  // runs sessions with a LoRA adapter (Session::SetAdapter)
  int queued_tasks = 0;
  int active_tasks = 0;
  int64_t kv_capacity_tokens = 0;
  int64_t kv_free_tokens = 0;
  int64_t kv_bytes_per_token = 0;
  DeviceCosts costs;
};

struct SystemSnapshot {
  std::vector<DeviceSnapshot> devices;  // every registered device, the cpu first, then gpu, gpu:1, ...
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
  // The route asks for a brief answer (`generate_small`); rule "small-answer" places it on
  // the CPU.
  bool small_answer = false;
  // Set when this round is asked again because `out_of_memory_device` ran out of memory for
  // the task (before any of the round's text was shown); rule "out-of-memory" places it on
  // the CPU. `out_of_memory_message` says what failed.
  std::optional<Device> out_of_memory_device;
  std::string out_of_memory_message;
  // The LoRA adapter the task's session uses (Session::SetAdapter); empty: none. Only
  // devices with DeviceSnapshot::can_apply_adapters run its encode and decode.
  std::string adapter;
};

// The rules the engine applies to a policy's placement unless it sets override_rules, each
// reported as "; rule <name>: <why>" at the end of the reason:
//  - "out-of-memory": a round re-asked after a device ran out of memory runs on the CPU;
//  - "small-answer": a brief answer (TaskState::small_answer) is encoded and decoded on the CPU;
//  - "device-unavailable": a device that is not available (or, for kEmbed, cannot embed;
//    for a task with an adapter, cannot apply adapters) is replaced by the CPU; a KV policy of swap-to-host for KV already on the CPU becomes keep.
// The hand-off of a prompt from Understand's device to Generate's is reported as rule
// "prefill-handoff" in the Understand stage's reason; a policy avoids it by placing both
// stages on one device.
HETERO_EXPORT Placement ApplyPlacementRules(Stage stage, const TaskState& task, const SystemSnapshot& system,
                                            Placement proposed);

// ---- Mixture-of-experts models on a GPU with a memory budget (EngineOptions::
// gpu_memory_budget_bytes). Where the routed experts do not all fit, the GPU keeps some and
// the CPU evaluates the rest: each such layer sends its tokens' inputs and choices to the
// host and the experts' weighted sum back, so activations cross the bus, not weights.

// One mixture-of-experts layer as the GPU would hold it.
struct ExpertLayerFacts {
  int layer = 0;                  // the model's layer index
  int experts = 0;                // routed experts
  int used = 0;                   // chosen per token
  uint64_t bytes_per_expert = 0;  // one expert's gate, up and down matrices on the GPU
  // The share of this layer's evaluations each expert had (`experts` entries, as measured
  // on earlier runs); empty: unknown, taken as uniform.
  std::vector<double> usage;
};

struct ExpertPlacementFacts {
  Device gpu = Device::kGpu;
  uint64_t budget_bytes = 0;  // the most device memory the model may hold
  // What the GPU holds whatever the placement: every weight but the routed experts
  // (embeddings, attention, norms, routers, shared experts, the output), the KV pool and
  // the scratch buffers.
  uint64_t fixed_bytes = 0;
  std::vector<ExpertLayerFacts> layers;  // the mixture-of-experts layers, ascending
};

// How often each routed expert was chosen (token x chosen expert), per mixture-of-experts
// layer: what Engine::expert_usage measures, what Engine::SaveExpertUsage writes and
// EngineOptions::expert_usage_path reads back, so that a later load places the experts an
// earlier run used most (it fills ExpertLayerFacts::usage).
struct ExpertUsage {
  struct Layer {
    int layer = 0;                      // the model's layer index
    std::vector<uint64_t> evaluations;  // per routed expert
  };
  std::vector<Layer> layers;  // ascending layer index, each at most once
};
// {"expert_usage_version": 1, "layers": [{"layer": L, "evaluations": [n, ...]}, ...]}
HETERO_EXPORT std::string ExpertUsageToJson(const ExpertUsage& usage);
// The JSON above, strictly: unknown or repeated keys, duplicate or unordered layers,
// negative or fractional counts, nesting deeper than the format's, more than 65536 layers
// or experts per layer, or 2^21 values in all, are InvalidArgument.
HETERO_EXPORT absl::StatusOr<ExpertUsage> ParseExpertUsage(std::string_view json);
// The layer-by-layer sum (a layer in one only is kept); InvalidArgument when a layer has a
// different number of experts in each, or a sum would overflow.
HETERO_EXPORT absl::StatusOr<ExpertUsage> AddExpertUsage(const ExpertUsage& a, const ExpertUsage& b);
// The file at `path` (at most 16 MiB), parsed; NotFound when it is missing or cannot be
// read, InvalidArgument naming the path when it is not such a file.
HETERO_EXPORT absl::StatusOr<ExpertUsage> ReadExpertUsageFile(const std::string& path);
// ExpertUsageToJson written to `path` whole or not at all (a temporary file renamed over
// it); NotFound when its directory does not exist, ResourceExhausted for a full disk, else
// InvalidArgument.
HETERO_EXPORT absl::Status WriteExpertUsageFile(const ExpertUsage& usage, const std::string& path);

// Which routed experts the GPU holds; the CPU evaluates the others.
struct ExpertPlacement {
  std::vector<std::vector<bool>> on_gpu;  // per entry of facts.layers, per expert
  std::string reason;                     // one line, for the backend's summary
};

// The built-in expert placement: (a) every expert on the GPU when all fit; otherwise (c)
// the experts with the most expected evaluations per byte within the budget (with equal
// usage, whole layers from the first: a layer whose experts are all resident needs no trip
// to the host), the rest on the CPU; (b) when no expert fits beside the fixed weights.
// ResourceExhausted, naming the sizes, when the fixed bytes alone exceed the budget.
HETERO_EXPORT absl::StatusOr<ExpertPlacement> PlaceExpertsWithinBudget(const ExpertPlacementFacts& facts);
// The bytes a placement keeps on the GPU beyond the fixed ones; InvalidArgument when its
// shape does not match the facts.
HETERO_EXPORT absl::StatusOr<uint64_t> ResidentExpertBytes(const ExpertPlacementFacts& facts,
                                                           const ExpertPlacement& placement);

class HETERO_EXPORT Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual std::string name() const = 0;
  // Must be thread-safe: several sessions may ask at once.
  virtual Placement Place(Stage stage, const TaskState& task, const SystemSnapshot& system) = 0;
  // Called once per GPU at load for a mixture-of-experts model when the engine has a GPU
  // memory budget. The engine refuses (at load) a placement over the budget or of the
  // wrong shape. Default: PlaceExpertsWithinBudget.
  virtual absl::StatusOr<ExpertPlacement> PlaceExperts(const ExpertPlacementFacts& facts) {
    return PlaceExpertsWithinBudget(facts);
  }
};

// "seed" (Understand, ToolCall and Embed on the CPU, Generate on a GPU), "all-cpu",
// "all-gpu", "cost" (least joules within the latency target; InferCept-style least-waste KV
// policy). With several GPUs, Generate stays on the GPU that holds the task's KV, else goes
// to the least loaded one. An unknown name is InvalidArgument listing these.
HETERO_EXPORT absl::StatusOr<std::unique_ptr<Scheduler>> MakeScheduler(std::string_view name);
// The built-in policies' names, in the order above.
HETERO_EXPORT const std::vector<std::string>& BuiltInSchedulers();

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
