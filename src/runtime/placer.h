// The one place that decides placement: the scheduler's choice for a stage, with the
// placement rules applied (include/hetero/scheduler.h, ApplyPlacementRules) and a notice,
// once, when a rule moves work off a device that is unavailable. Stages and the engine ask
// here; none picks a device itself.
#ifndef HETERO_RUNTIME_PLACER_H_
#define HETERO_RUNTIME_PLACER_H_

#include <memory>

#include "hetero/scheduler.h"
#include "src/runtime/device_registry.h"
#include "src/runtime/sync.h"

namespace hetero {

class Placer {
 public:
  Placer(DeviceRegistry& devices, std::shared_ptr<Scheduler> policy, double host_device_gb_per_s, bool calibrated)
      : devices_(devices), policy_(std::move(policy)), host_device_gb_per_s_(host_device_gb_per_s),
        calibrated_(calibrated) {}

  // Thread-safe. The returned device is one of the engine's, available and able to run `stage`.
  Placement Place(Stage stage, const TaskState& task);
  // The same against a snapshot the caller took, so that decisions taken together (a
  // task's Understand and Generate) see one state of the system.
  Placement PlaceWith(Stage stage, const TaskState& task, const SystemSnapshot& system);
  SystemSnapshot Snapshot() const { return devices_.Snapshot(host_device_gb_per_s_, calibrated_); }
  const Scheduler& policy() const { return *policy_; }

 private:
  DeviceRegistry& devices_;
  std::shared_ptr<Scheduler> policy_;
  const double host_device_gb_per_s_;
  const bool calibrated_;
  Mutex mu_;
  bool unavailable_noticed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_PLACER_H_
