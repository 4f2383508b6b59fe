#include "src/runtime/placer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/runtime/log_internal.h"

namespace hetero {

Placement Placer::Place(Stage stage, const TaskState& task) { return PlaceWith(stage, task, Snapshot()); }

Placement Placer::PlaceWith(Stage stage, const TaskState& task, const SystemSnapshot& system) {
  const Placement proposed = policy_->Place(stage, task, system);
  Placement p = ApplyPlacementRules(stage, task, system, proposed);
  const DeviceSnapshot* chosen = system.Find(proposed.device);
  // Noticed once: a device the policy wanted that is not there (not one that merely cannot
  // embed, which the reason says each time).
  if (p.device != proposed.device && (chosen == nullptr || !chosen->available) &&
      absl::StrContains(p.reason, "rule device-unavailable")) {
    bool notice = false;
    {
      MutexLock lock(&mu_);
      notice = !unavailable_noticed_;
      unavailable_noticed_ = true;
    }
    if (notice) {
      const DeviceSnapshot* d = chosen;
      internal::Log(LogLevel::kWarning,
                    absl::StrCat("scheduler '", policy_->name(), "' placed ", std::string(StageName(stage)), " on the ",
                                 DeviceName(proposed.device), ", which cannot run it (",
                                 d == nullptr ? "no such device" : d->available ? "no embeddings" : d->unavailable_reason,
                                 "); running on the CPU"));
    }
  }
  return p;
}

}  // namespace hetero
