// Built-in scheduling policies and calibration profiles.
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hetero/scheduler.h"

namespace hetero {

DeviceCosts DefaultCosts(Device device) {
  DeviceCosts c;
  if (!device.is_gpu()) {
    // Below what the 2-vCPU development machine measures for the default model, so an
    // uncalibrated engine does not promise too much of an unknown CPU.
    c.prefill_tokens_per_s = 200;
    c.decode_tokens_per_s = 50;
    c.batched_decode_tokens_per_s = 150;
    c.active_watts = 40;
    c.idle_watts = 15;
  } else {
    c.prefill_tokens_per_s = 20000;
    c.decode_tokens_per_s = 500;
    c.batched_decode_tokens_per_s = 5000;
    c.active_watts = 350;
    c.idle_watts = 70;
  }
  return c;
}

namespace {

Placement Place(Device d, std::string reason, KvPolicy kv = KvPolicy::kKeep) {
  Placement p;
  p.device = d;
  p.kv_policy = kv;
  p.reason = std::move(reason);
  return p;
}

// While the task waits on a tool with its KV on a GPU, the GPU memory is better used by
// others: swap to host. KV already on the host stays.
KvPolicy HostFriendlyKvPolicy(const TaskState& t) {
  return t.kv_device.is_gpu() && t.kv_tokens > 0 ? KvPolicy::kSwapToHost : KvPolicy::kKeep;
}

// The GPU for a task: the one holding its KV when that one is available (nothing to move),
// else the available GPU with the fewest tasks (then the most free KV, then the lowest
// ordinal), else the first GPU (which the device-unavailable rule replaces by the CPU).
Device ChooseGpu(const TaskState& task, const SystemSnapshot& system) {
  if (task.kv_device.is_gpu() && task.kv_tokens > 0) {
    const DeviceSnapshot* held = system.Find(task.kv_device);
    if (held != nullptr && held->available) return task.kv_device;
  }
  const DeviceSnapshot* best = nullptr;
  for (const DeviceSnapshot& d : system.devices) {
    if (!d.device.is_gpu() || !d.available) continue;
    const int load = d.queued_tasks + d.active_tasks;
    const int best_load = best == nullptr ? 0 : best->queued_tasks + best->active_tasks;
    if (best == nullptr || load < best_load || (load == best_load && d.kv_free_tokens > best->kv_free_tokens)) best = &d;
  }
  return best != nullptr ? best->device : Device::kGpu;
}

class FixedScheduler : public Scheduler {
 public:
  FixedScheduler(std::string name, DeviceKind understand, DeviceKind generate)
      : name_(std::move(name)), understand_(understand), generate_(generate) {}
  std::string name() const override { return name_; }
  Placement Place(Stage stage, const TaskState& task, const SystemSnapshot& system) override {
    const auto on = [&](DeviceKind kind) { return kind == DeviceKind::kGpu ? ChooseGpu(task, system) : Device::kCpu; };
    switch (stage) {
      case Stage::kUnderstand: return hetero::Place(on(understand_), name_);
      case Stage::kGenerate: return hetero::Place(on(generate_), name_);
      case Stage::kToolCall: return hetero::Place(Device::kCpu, name_, HostFriendlyKvPolicy(task));
      case Stage::kEmbed: {
        // Where Understand runs, when that device computes embeddings; else the CPU.
        const Device d = on(understand_);
        const DeviceSnapshot* ds = system.Find(d);
        return hetero::Place(ds != nullptr && ds->available && ds->can_embed ? d : Device::kCpu, name_);
      }
    }
    return hetero::Place(Device::kCpu, name_);
  }

 private:
  std::string name_;
  DeviceKind understand_;
  DeviceKind generate_;
};

// Picks, among available devices, the one with the fewest joules for the stage whose
// estimated time meets the latency target (the fastest if none does). Joules count the
// device's active power over the stage plus the idle power of the other devices held
// meanwhile, and moving the KV cache if it lives elsewhere.
class CostScheduler : public Scheduler {
 public:
  std::string name() const override { return "cost"; }

  Placement Place(Stage stage, const TaskState& task, const SystemSnapshot& system) override {
    if (stage == Stage::kToolCall) return PlaceToolCall(task, system);
    if (stage == Stage::kEmbed) return hetero::Place(Device::kCpu, "cost: embeddings run on the cpu");
    struct Option {
      Device device;
      double seconds;
      double joules;
    };
    std::vector<Option> options;
    for (const DeviceSnapshot& d : system.devices) {
      if (!d.available) continue;
      double seconds = 0;
      if (stage == Stage::kUnderstand) {
        seconds = task.uncached_prompt_tokens / std::max(1.0, d.costs.prefill_tokens_per_s);
      } else {
        // Sharing the device with its active tasks: each gets a share of the batched rate,
        // but never more than a lone sequence gets.
        const double share = std::max(1.0, d.costs.batched_decode_tokens_per_s) / (d.active_tasks + 1);
        seconds = task.max_new_tokens / std::max(1.0, std::min(share, d.costs.decode_tokens_per_s));
      }
      if (task.kv_tokens > 0 && task.kv_device != d.device && system.host_device_gb_per_s > 0) {
        seconds += static_cast<double>(task.kv_tokens) * d.kv_bytes_per_token / (system.host_device_gb_per_s * 1e9);
      }
      double joules = seconds * d.costs.active_watts;
      for (const DeviceSnapshot& other : system.devices) {
        if (other.available && other.device != d.device) joules += seconds * other.costs.idle_watts;
      }
      options.push_back({d.device, seconds, joules});
    }
    if (options.empty()) return hetero::Place(Device::kCpu, "cost: no device reports available");
    const Option* best = nullptr;
    const bool has_target = task.latency_target_seconds > 0;
    for (const Option& o : options) {
      if (has_target && o.seconds > task.latency_target_seconds) continue;
      if (best == nullptr || o.joules < best->joules) best = &o;
    }
    const bool met = best != nullptr;
    if (!met) {
      for (const Option& o : options) {
        if (best == nullptr || o.seconds < best->seconds) best = &o;
      }
    }
    return hetero::Place(best->device,
                         absl::StrFormat("cost: %.3f s, %.2f J on %s%s%s", best->seconds, best->joules,
                                         DeviceName(best->device), system.calibrated ? "" : " (default costs)",
                                         met ? "" : "; no device meets the latency target, fastest chosen"));
  }

 private:
  // InferCept's rule: the least memory-time wasted. Keeping holds the KV for the tool's
  // duration; swapping holds it while it moves out and back; discarding frees it now and
  // pays a recompute of the prompt later (during which the memory is held again).
  Placement PlaceToolCall(const TaskState& task, const SystemSnapshot& system) {
    const DeviceSnapshot* kv_dev = system.Find(task.kv_device);
    if (task.kv_tokens == 0 || kv_dev == nullptr) return hetero::Place(Device::kCpu, "cost: no KV held");
    const double bytes = static_cast<double>(task.kv_tokens) * std::max<int64_t>(1, kv_dev->kv_bytes_per_token);
    const double keep = bytes * task.expected_tool_seconds;
    const double recompute_s = task.prompt_tokens / std::max(1.0, kv_dev->costs.prefill_tokens_per_s);
    const double discard = bytes * recompute_s;
    double swap = std::numeric_limits<double>::infinity();
    if (task.kv_device.is_gpu() && system.host_device_gb_per_s > 0) {
      swap = bytes * 2.0 * bytes / (system.host_device_gb_per_s * 1e9);
    }
    // Host memory (KV on the CPU) is only worth freeing when it is actually scarce.
    const bool scarce = kv_dev->kv_capacity_tokens > 0 && kv_dev->kv_free_tokens * 4 < kv_dev->kv_capacity_tokens;
    KvPolicy policy = KvPolicy::kKeep;
    double best = keep;
    if (swap < best) {
      policy = KvPolicy::kSwapToHost;
      best = swap;
    }
    if ((task.kv_device.is_gpu() || scarce) && discard < best) policy = KvPolicy::kDiscard;
    return hetero::Place(Device::kCpu,
                         absl::StrFormat("cost: waste keep %.3g, swap %.3g, discard %.3g byte-seconds%s", keep, swap,
                                         discard, scarce ? " (KV memory scarce)" : ""),
                         policy);
  }
};

}  // namespace

const std::vector<std::string>& BuiltInSchedulers() {
  static const std::vector<std::string> names = {"seed", "all-cpu", "all-gpu", "cost"};
  return names;
}

absl::StatusOr<std::unique_ptr<Scheduler>> MakeScheduler(std::string_view name) {
  if (name == "seed") return std::make_unique<FixedScheduler>("seed", DeviceKind::kCpu, DeviceKind::kGpu);
  if (name == "all-cpu") return std::make_unique<FixedScheduler>("all-cpu", DeviceKind::kCpu, DeviceKind::kCpu);
  if (name == "all-gpu") return std::make_unique<FixedScheduler>("all-gpu", DeviceKind::kGpu, DeviceKind::kGpu);
  if (name == "cost") return std::make_unique<CostScheduler>();
  return absl::InvalidArgumentError(absl::StrCat("unknown scheduler '", std::string(name), "' (accepted: ",
                                                 absl::StrJoin(BuiltInSchedulers(), ", "), ")"));
}

absl::StatusOr<Calibration> LoadCalibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("calibration profile '", path, "' cannot be read"));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("devices") || !j["devices"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("calibration profile '", path, "' is not a hetero profile"));
  }
  Calibration c;
  auto number = [&](const nlohmann::json& o, const char* key) -> absl::StatusOr<double> {
    if (!o.contains(key) || !o[key].is_number() || !(o[key].get<double>() >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("calibration profile '", path, "': '", key,
                                                     "' missing or not a non-negative number"));
    }
    return o[key].get<double>();
  };
  for (const auto& [name, value] : j["devices"].items()) {
    absl::StatusOr<Device> parsed = ParseDevice(name);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration profile '", path, "': unknown device '", name, "' (", parsed.status().message(), ")"));
    }
    const Device d = *parsed;
    DeviceCosts costs;
    for (auto [key, field] : {std::pair{"prefill_tokens_per_s", &costs.prefill_tokens_per_s},
                              std::pair{"decode_tokens_per_s", &costs.decode_tokens_per_s},
                              std::pair{"batched_decode_tokens_per_s", &costs.batched_decode_tokens_per_s},
                              std::pair{"active_watts", &costs.active_watts}, std::pair{"idle_watts", &costs.idle_watts}}) {
      absl::StatusOr<double> v = number(value, key);
      if (!v.ok()) return v.status();
      *field = *v;
    }
    c.devices.emplace_back(d, costs);
  }
  if (j.contains("host_device_gb_per_s") && j["host_device_gb_per_s"].is_number()) {
    c.host_device_gb_per_s = j["host_device_gb_per_s"].get<double>();
  }
  if (j.contains("machine") && j["machine"].is_string()) c.machine = j["machine"].get<std::string>();
  if (j.contains("date") && j["date"].is_string()) c.date = j["date"].get<std::string>();
  return c;
}

absl::Status SaveCalibration(const Calibration& c, const std::string& path) {
  nlohmann::json j;
  j["machine"] = c.machine;
  j["date"] = c.date;
  j["host_device_gb_per_s"] = c.host_device_gb_per_s;
  j["devices"] = nlohmann::json::object();
  for (const auto& [device, costs] : c.devices) {
    j["devices"][std::string(DeviceName(device))] = {
        {"prefill_tokens_per_s", costs.prefill_tokens_per_s},
        {"decode_tokens_per_s", costs.decode_tokens_per_s},
        {"batched_decode_tokens_per_s", costs.batched_decode_tokens_per_s},
        {"active_watts", costs.active_watts},
        {"idle_watts", costs.idle_watts}};
  }
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return absl::InternalError(absl::StrCat("cannot write calibration profile '", path, "'"));
  return absl::OkStatus();
}

}  // namespace hetero
