// The engine's energy meter: samples every device's counters on a thread into timelines,
// remembers the stage windows of recent tasks, and attributes energy to a finished task's
// stages (sharing devices with the tasks that overlapped it). Stages of other tasks that
// are still running when a task ends are not yet known to it (docs/METRICS.md).
#ifndef HETERO_RUNTIME_ENERGY_ENERGY_METER_H_
#define HETERO_RUNTIME_ENERGY_ENERGY_METER_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hetero/energy.h"
#include "src/runtime/energy/energy_timeline.h"

namespace hetero::internal {

class EnergyMeter {
 public:
  // `notes`: how the counters were chosen (e.g. why a device is estimated), for reports.
  EnergyMeter(std::vector<std::unique_ptr<EnergyCounter>> counters, std::chrono::milliseconds interval,
              std::string notes);
  ~EnergyMeter();

  // Reads every counter now (the thread also does, every interval).
  void Sample();
  // Energy of `task_windows` (one task's stages), shared with the remembered windows of
  // other tasks that overlap them; then remembers these windows too.
  std::vector<StageEnergy> AttributeTask(const std::vector<StageWindow>& task_windows);

  bool estimated(Device device) const;  // true also for a device without any counter
  std::string sources() const;          // "rapl:package-0 (measured); model:gpu (estimated)"
  const std::string& notes() const { return notes_; }

 private:
  void Run();

  std::vector<std::unique_ptr<EnergyCounter>> counters_;
  const std::chrono::milliseconds interval_;
  const std::string notes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<Device, EnergyTimeline> timelines_;  // guarded by mu_
  std::deque<StageWindow> recent_;              // guarded by mu_; finished tasks' windows
  std::thread thread_;
};

// The meter for an engine: RAPL for the CPU where readable, else the stated power model
// (`power_model_path`, or $HETERO_POWER_MODEL, or the defaults) over the worker's busy time;
// with `gpu_busy_seconds` (an engine with a GPU worker), NVML for the GPU where it answers,
// else the GPU's power model over that worker's busy time.
// `gpus`: each GPU of the engine with its worker's busy time (empty without a GPU).
std::unique_ptr<EnergyMeter> MakeEngineEnergyMeter(
    const std::string& power_model_path, std::function<double()> cpu_busy_seconds,
    std::vector<std::pair<Device, std::function<double()>>> gpus = {});

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_ENERGY_ENERGY_METER_H_
