// Energy: where the joules in a TaskReport come from. An EnergyCounter is one device's
// cumulative energy (a RAPL powercap domain, an NVML GPU, or a stated power model when no
// counter exists); every figure says whether it was measured or estimated. docs/METRICS.md
// explains the sources, their resolution and their errors.
#ifndef HETERO_ENERGY_H_
#define HETERO_ENERGY_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/export.h"
#include "hetero/scheduler.h"

namespace hetero {

class HETERO_EXPORT EnergyCounter {
 public:
  virtual ~EnergyCounter() = default;
  virtual std::string name() const = 0;  // "rapl:package-0", "model:cpu", ...
  virtual Device device() const = 0;
  virtual bool estimated() const = 0;    // a power model, not a measurement
  // Joules since the counter was created, never decreasing (wrap-around of the hardware
  // counter is handled here, as long as it is read at least once per wrap period).
  virtual absl::StatusOr<double> ReadJoules() = 0;
};

// RAPL through the powercap sysfs tree (`root`, normally /sys/class/powercap): one counter
// per package domain ("package-N") and per DRAM subdomain ("dram"), for Intel and for AMD
// where the kernel exposes them. Domains whose energy_uj cannot be read (no permission:
// root only since Linux 5.10) are skipped; `why_none` then says why no counter was found.
HETERO_EXPORT std::vector<std::unique_ptr<EnergyCounter>> FindRaplCounters(const std::string& root,
                                                                          std::string* why_none);

// NVIDIA GPUs through NVML (`library`, normally "libnvidia-ml.so.1", loaded at run time):
// the total-energy counter where the GPU has it (Volta and later), else the power reading
// integrated between reads. Empty, with `why_none`, when there is no driver or GPU.
HETERO_EXPORT std::vector<std::unique_ptr<EnergyCounter>> FindNvmlCounters(const std::string& library,
                                                                          std::string* why_none);

// A stated power model for a device without a counter: idle watts while the device is
// held, plus active watts (per busy thread for the CPU) while it works.
struct PowerModel {
  double idle_watts = 0;
  double active_watts = 0;  // on top of idle, at full use
};

// Default models (documented in docs/METRICS.md, overridable by a JSON file).
HETERO_EXPORT PowerModel DefaultPowerModel(Device device);
// {"cpu": {"idle_watts": 10, "active_watts": 35}, "gpu": {...}}; missing entries keep
// their defaults. InvalidArgument naming the bad field.
HETERO_EXPORT absl::StatusOr<std::vector<std::pair<Device, PowerModel>>> LoadPowerModels(const std::string& path);

// An estimated counter: idle_watts x elapsed + active_watts x busy seconds, where
// `busy_seconds` returns the device's cumulative busy time (0..elapsed).
HETERO_EXPORT std::unique_ptr<EnergyCounter> MakePowerModelCounter(Device device, PowerModel model,
                                                                  std::function<double()> busy_seconds);

}  // namespace hetero

#endif  // HETERO_ENERGY_H_
