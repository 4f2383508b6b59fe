#include <algorithm>
#include "src/runtime/energy/energy_meter.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/log_internal.h"

namespace hetero::internal {
namespace {

// Windows remembered for overlap with later tasks: enough for long agent runs.
constexpr auto kRememberWindows = std::chrono::minutes(30);
// Timelines keep this much history; older samples cannot matter to a task still running
// unless it ran longer (its figures are then marked interpolated).
constexpr auto kKeepHistory = std::chrono::minutes(30);

}  // namespace

EnergyMeter::EnergyMeter(std::vector<std::unique_ptr<EnergyCounter>> counters, std::chrono::milliseconds interval,
                         std::string notes)
    : counters_(std::move(counters)), interval_(interval), notes_(std::move(notes)) {
  Sample();
  thread_ = std::thread([this] { Run(); });
}

EnergyMeter::~EnergyMeter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EnergyMeter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    Sample();
    lock.lock();
  }
}

void EnergyMeter::Sample() {
  std::map<Device, double> joules;
  const EnergyClock::time_point before = EnergyClock::now();
  for (const auto& counter : counters_) {
    absl::StatusOr<double> j = counter->ReadJoules();
    if (j.ok()) joules[counter->device()] += *j;  // a failed read leaves a gap to interpolate
  }
  // The readings are stamped with the middle of the time they took.
  const EnergyClock::time_point now = before + (EnergyClock::now() - before) / 2;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [device, j] : joules) {
    EnergyTimeline& t = timelines_[device];
    t.Add(now, j);
    t.TrimBefore(now - kKeepHistory);
  }
}

std::vector<StageEnergy> EnergyMeter::AttributeTask(const std::vector<StageWindow>& task_windows) {
  Sample();  // the task's last stage just ended: a reading at its edge
  std::lock_guard<std::mutex> lock(mu_);
  if (task_windows.empty()) return {};
  EnergyClock::time_point first = task_windows.front().start, last = task_windows.front().end;
  for (const StageWindow& w : task_windows) {
    first = std::min(first, w.start);
    last = std::max(last, w.end);
  }
  std::vector<StageWindow> windows = task_windows;
  for (const StageWindow& w : recent_) {
    if (w.end > first && w.start < last) windows.push_back(w);
  }
  std::vector<StageEnergy> all = AttributeEnergy(windows, timelines_);
  all.resize(task_windows.size());
  for (const StageWindow& w : task_windows) recent_.push_back(w);
  while (!recent_.empty() && recent_.front().end < EnergyClock::now() - kRememberWindows) recent_.pop_front();
  return all;
}

bool EnergyMeter::estimated(Device device) const {
  bool any = false;
  for (const auto& c : counters_) {
    if (c->device() != device) continue;
    any = true;
    if (c->estimated()) return true;
  }
  return !any;
}

std::string EnergyMeter::sources() const {
  std::vector<std::string> parts;
  for (const auto& c : counters_) {
    parts.push_back(absl::StrCat(c->name(), c->estimated() ? " (estimated)" : " (measured)"));
  }
  return absl::StrJoin(parts, "; ");
}

std::unique_ptr<EnergyMeter> MakeEngineEnergyMeter(
    const std::string& power_model_path, std::function<double()> cpu_busy_seconds,
    std::vector<std::pair<Device, std::function<double()>>> gpus) {
  std::vector<std::unique_ptr<EnergyCounter>> counters;
  std::string why_no_rapl;
  counters = FindRaplCounters("/sys/class/powercap", &why_no_rapl);
  std::string notes;
  if (counters.empty()) {
    PowerModel model = DefaultPowerModel(Device::kCpu);
    std::string path = power_model_path;
    if (path.empty()) {
      const char* env = std::getenv("HETERO_POWER_MODEL");
      if (env != nullptr) path = env;
    }
    std::string from = "the default power model";
    if (!path.empty()) {
      absl::StatusOr<std::vector<std::pair<Device, PowerModel>>> models = LoadPowerModels(path);
      if (models.ok()) {
        model = models->front().second;
        from = absl::StrCat("the power model in ", path);
      } else {
        Log(LogLevel::kWarning, absl::StrCat("energy: ", models.status().message(), "; using the default power model"));
      }
    }
    counters.push_back(MakePowerModelCounter(Device::kCpu, model, std::move(cpu_busy_seconds)));
    notes = absl::StrCat("cpu energy is estimated from ", from, " (", model.idle_watts, " W idle + ", model.active_watts,
                         " W while computing): ", why_no_rapl);
  } else {
    notes = "cpu energy is measured by RAPL";
  }
  if (!gpus.empty()) {
    std::string why_no_nvml;
    std::vector<std::unique_ptr<EnergyCounter>> nvml = FindNvmlCounters("libnvidia-ml.so.1", &why_no_nvml);
    PowerModel model = DefaultPowerModel(Device::kGpu);
    std::string path = power_model_path;
    if (path.empty()) {
      if (const char* env = std::getenv("HETERO_POWER_MODEL"); env != nullptr) path = env;
    }
    if (!path.empty()) {
      absl::StatusOr<std::vector<std::pair<Device, PowerModel>>> models = LoadPowerModels(path);
      if (models.ok()) {
        for (const auto& [device, m] : *models) {
          if (device.is_gpu()) model = m;
        }
      }
    }
    int measured = 0;
    for (auto& gpu : gpus) {
      const Device device = gpu.first;
      // NVML numbers GPUs as CUDA does by default (CUDA_DEVICE_ORDER=PCI_BUS_ID makes it sure).
      auto it = std::find_if(nvml.begin(), nvml.end(), [device](const auto& c) { return c != nullptr && c->device() == device; });
      if (it != nvml.end()) {
        counters.push_back(std::move(*it));
        ++measured;
      } else {
        counters.push_back(MakePowerModelCounter(device, model, std::move(gpu.second)));
      }
    }
    if (measured == static_cast<int>(gpus.size())) {
      absl::StrAppend(&notes, "; gpu energy is measured by NVML");
    } else {
      absl::StrAppend(&notes, "; gpu energy is estimated from its power model (", model.idle_watts, " W idle + ",
                      model.active_watts, " W while computing) for ", gpus.size() - measured, " of ", gpus.size(),
                      " GPUs: ", why_no_nvml);
    }
  }
  Log(LogLevel::kInfo, absl::StrCat("energy: ", notes));
  return std::make_unique<EnergyMeter>(std::move(counters), std::chrono::milliseconds(20), notes);
}

}  // namespace hetero::internal
