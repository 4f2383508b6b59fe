// Energy over time and its attribution to stages. A timeline holds samples of one device's
// cumulative joules; the energy in any window comes from linear interpolation between the
// samples where the counter moved (a counter that updates every 20-100 ms, as NVML's does,
// repeats its value in between: those repeats carry no information and are skipped).
// Attribution splits each device's energy among the stage windows using it, by their share
// of device time, and the energy of devices held but idle during a window among the windows
// active then. Past the counter's last movement, energy is extended at the last update
// period's power for at most one more period.
#ifndef HETERO_RUNTIME_ENERGY_ENERGY_TIMELINE_H_
#define HETERO_RUNTIME_ENERGY_ENERGY_TIMELINE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "hetero/scheduler.h"

namespace hetero::internal {

using EnergyClock = std::chrono::steady_clock;

class EnergyTimeline {
 public:
  // Samples in time order; a value below the previous one is treated as no movement.
  void Add(EnergyClock::time_point time, double joules);

  struct Window {
    double joules = 0;
    // An edge of the window lies between two counter movements further apart than the
    // window itself: the figure is interpolated, not measured at its edges.
    bool interpolated = false;
    bool covered = false;  // samples exist before and after the window
  };
  Window Between(EnergyClock::time_point start, EnergyClock::time_point end) const;

  double JoulesAt(EnergyClock::time_point time) const;
  // Drops samples older than `time`, keeping the last one before it.
  void TrimBefore(EnergyClock::time_point time);
  size_t knots() const { return knots_.size(); }

 private:
  struct Knot {
    EnergyClock::time_point time;
    double joules;
  };
  std::deque<Knot> knots_;  // where the counter moved, plus the first and last samples
  EnergyClock::time_point last_time_{};  // the last sample's time (the last knot may be earlier)
  bool last_was_repeat_ = false;
};

struct StageWindow {
  uint64_t task_id = 0;
  int stage_index = 0;  // in the task's report
  Device device = Device::kCpu;
  EnergyClock::time_point start, end;
};

struct StageEnergy {
  uint64_t task_id = 0;
  int stage_index = 0;
  double device_joules = 0;  // its share of its own device's energy
  double idle_joules = 0;    // its share of the energy of other devices, idle but held
  bool interpolated = false;
};

// For each window, its share of energy. Within each interval where the set of active
// windows does not change: a device's energy goes in equal parts to the windows running on
// it; if none runs on it, in equal parts to all active windows (as idle energy). Energy
// outside every window is not attributed.
std::vector<StageEnergy> AttributeEnergy(const std::vector<StageWindow>& windows,
                                         const std::map<Device, EnergyTimeline>& devices);

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_ENERGY_ENERGY_TIMELINE_H_
