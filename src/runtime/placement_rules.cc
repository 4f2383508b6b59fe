// Names of stages, devices and KV policies, and the placement rules the engine applies to
// every policy's choice (include/hetero/scheduler.h).
#include <charconv>

#include "absl/strings/str_cat.h"
#include "hetero/scheduler.h"

namespace hetero {

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kUnderstand: return "understand";
    case Stage::kGenerate: return "generate";
    case Stage::kToolCall: return "tool_call";
    case Stage::kEmbed: return "embed";
  }
  return "?";
}

std::string DeviceName(Device device) {
  if (!device.is_gpu()) return "cpu";
  return device.ordinal == 0 ? "gpu" : absl::StrCat("gpu:", device.ordinal);
}

absl::StatusOr<Device> ParseDevice(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "gpu") return Device::kGpu;
  if (name.substr(0, 4) == "gpu:" && name.size() > 4 && name.size() <= 7) {
    int ordinal = 0;
    const std::string_view digits = name.substr(4);
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (error == std::errc() && end == digits.data() + digits.size() && ordinal >= 0) return Device::Gpu(ordinal);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", std::string(name), "' (accepted: cpu, gpu, gpu:N for the N-th GPU from 0)"));
}

std::string_view KvPolicyName(KvPolicy policy) {
  switch (policy) {
    case KvPolicy::kKeep: return "keep";
    case KvPolicy::kSwapToHost: return "swap_to_host";
    case KvPolicy::kDiscard: return "discard";
  }
  return "?";
}

namespace {

// Runs the stage: available, able to embed when the stage is kEmbed, and to apply the
// task's adapter when it encodes or decodes with one.
bool CanRun(Stage stage, const TaskState& task, const DeviceSnapshot* d) {
  const bool needs_adapter = !task.adapter.empty() && (stage == Stage::kUnderstand || stage == Stage::kGenerate);
  return d != nullptr && d->available && (stage != Stage::kEmbed || d->can_embed) &&
         (!needs_adapter || d->can_apply_adapters);
}

void MoveToCpu(Stage stage, const TaskState& task, Placement& p, std::string_view rule, std::string_view why) {
  absl::StrAppend(&p.reason, "; rule ", absl::string_view(rule.data(), rule.size()), ": ",
                  absl::string_view(why.data(), why.size()));
  p.device = Device::kCpu;
  if (stage == Stage::kToolCall && p.kv_policy == KvPolicy::kSwapToHost && !task.kv_device.is_gpu()) {
    p.kv_policy = KvPolicy::kKeep;  // the KV is in host memory already
  }
}

}  // namespace

Placement ApplyPlacementRules(Stage stage, const TaskState& task, const SystemSnapshot& system, Placement p) {
  // A policy that overrides the rules keeps its choice, unless the device cannot run it.
  const bool encode_or_decode = !p.override_rules && (stage == Stage::kUnderstand || stage == Stage::kGenerate);
  if (p.device != Device::kCpu && encode_or_decode && task.out_of_memory_device.has_value()) {
    MoveToCpu(stage, task, p, "out-of-memory",
              absl::StrCat(DeviceName(*task.out_of_memory_device), " out of memory (", task.out_of_memory_message,
                           "), re-placed on the cpu"));
  }
  if (p.device != Device::kCpu && encode_or_decode && task.small_answer) {
    MoveToCpu(stage, task, p, "small-answer", absl::StrCat("route '", task.route, "' answers briefly on the cpu"));
  }
  const DeviceSnapshot* chosen = system.Find(p.device);
  if (p.device != Device::kCpu && !CanRun(stage, task, chosen)) {
    std::string why;
    if (chosen == nullptr) {
      why = absl::StrCat(DeviceName(p.device), " is not one of the engine's devices, cpu used");
    } else if (!chosen->available) {
      why = absl::StrCat(DeviceName(p.device), " unavailable, cpu used");
    } else if (stage == Stage::kEmbed) {
      why = absl::StrCat(DeviceName(p.device), " cannot compute embeddings, cpu used");
    } else {
      why = absl::StrCat(DeviceName(p.device), " cannot apply LoRA adapters (adapter '", task.adapter, "'), cpu used");
    }
    MoveToCpu(stage, task, p, "device-unavailable", why);
  }
  return p;
}

}  // namespace hetero
