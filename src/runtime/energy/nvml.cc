// NVIDIA GPU energy through NVML, loaded at run time (no link dependency): the total-energy
// counter where the GPU has it (Volta and later), else power samples integrated over time.
#include <dlfcn.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "hetero/energy.h"

namespace hetero {
namespace {

// The few NVML entry points used, with their C types (nvml.h).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;

struct NvmlLibrary {
  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*device_count)(unsigned int*) = nullptr;
  NvmlReturn (*device_by_index)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*total_energy)(NvmlDevice, unsigned long long*) = nullptr;  // millijoules
  NvmlReturn (*power_usage)(NvmlDevice, unsigned int*) = nullptr;          // milliwatts

  ~NvmlLibrary() {
    if (shutdown != nullptr) shutdown();
    if (handle != nullptr) dlclose(handle);
  }
  std::string Error(NvmlReturn r) const {
    return error_string != nullptr ? absl::StrCat(error_string(r), " (", r, ")") : absl::StrCat("NVML error ", r);
  }
};

class NvmlEnergyCounter : public EnergyCounter {
 public:
  NvmlEnergyCounter(std::shared_ptr<NvmlLibrary> nvml, NvmlDevice device, unsigned index, unsigned long long first_mj)
      : nvml_(std::move(nvml)), device_(device), index_(index), first_mj_(first_mj) {}
  std::string name() const override { return absl::StrCat("nvml:", index_); }
  Device device() const override { return Device::Gpu(static_cast<int>(index_)); }
  bool estimated() const override { return false; }
  absl::StatusOr<double> ReadJoules() override {
    unsigned long long mj = 0;
    const NvmlReturn r = nvml_->total_energy(device_, &mj);
    if (r != kNvmlSuccess) return absl::UnavailableError(absl::StrCat("nvmlDeviceGetTotalEnergyConsumption: ", nvml_->Error(r)));
    return static_cast<double>(mj >= first_mj_ ? mj - first_mj_ : 0) * 1e-3;
  }

 private:
  std::shared_ptr<NvmlLibrary> nvml_;
  NvmlDevice device_;
  unsigned index_;
  unsigned long long first_mj_;
};

// Older GPUs: power (updated by the driver every 20-100 ms) integrated between reads.
class NvmlPowerCounter : public EnergyCounter {
 public:
  NvmlPowerCounter(std::shared_ptr<NvmlLibrary> nvml, NvmlDevice device, unsigned index)
      : nvml_(std::move(nvml)), device_(device), index_(index) {}
  std::string name() const override { return absl::StrCat("nvml-power:", index_); }
  Device device() const override { return Device::Gpu(static_cast<int>(index_)); }
  bool estimated() const override { return false; }
  absl::StatusOr<double> ReadJoules() override {
    unsigned int mw = 0;
    const NvmlReturn r = nvml_->power_usage(device_, &mw);
    if (r != kNvmlSuccess) return absl::UnavailableError(absl::StrCat("nvmlDeviceGetPowerUsage: ", nvml_->Error(r)));
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    const double watts = mw * 1e-3;
    if (have_last_) {
      // Trapezoid between the two readings.
      joules_ += 0.5 * (watts + last_watts_) * std::chrono::duration<double>(now - last_time_).count();
    }
    have_last_ = true;
    last_watts_ = watts;
    last_time_ = now;
    return joules_;
  }

 private:
  std::shared_ptr<NvmlLibrary> nvml_;
  NvmlDevice device_;
  unsigned index_;
  std::mutex mu_;
  bool have_last_ = false;
  double last_watts_ = 0;
  double joules_ = 0;
  std::chrono::steady_clock::time_point last_time_;
};

template <typename F>
bool Resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

}  // namespace

std::vector<std::unique_ptr<EnergyCounter>> FindNvmlCounters(const std::string& library, std::string* why_none) {
  std::vector<std::unique_ptr<EnergyCounter>> counters;
  const auto none = [&](std::string why) {
    if (why_none != nullptr) *why_none = std::move(why);
    return std::vector<std::unique_ptr<EnergyCounter>>{};
  };
  auto nvml = std::make_shared<NvmlLibrary>();
  nvml->handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml->handle == nullptr) {
    const char* error = dlerror();
    return none(absl::StrCat("no NVML: cannot load ", library, " (", error != nullptr ? error : "unknown error",
                             "; no NVIDIA driver)"));
  }
  if (!Resolve(nvml->handle, "nvmlInit_v2", nvml->init) || !Resolve(nvml->handle, "nvmlShutdown", nvml->shutdown) ||
      !Resolve(nvml->handle, "nvmlDeviceGetCount_v2", nvml->device_count) ||
      !Resolve(nvml->handle, "nvmlDeviceGetHandleByIndex_v2", nvml->device_by_index)) {
    nvml->shutdown = nullptr;
    return none(absl::StrCat("no NVML: ", library, " lacks the NVML entry points"));
  }
  Resolve(nvml->handle, "nvmlErrorString", nvml->error_string);
  Resolve(nvml->handle, "nvmlDeviceGetTotalEnergyConsumption", nvml->total_energy);
  Resolve(nvml->handle, "nvmlDeviceGetPowerUsage", nvml->power_usage);
  if (NvmlReturn r = nvml->init(); r != kNvmlSuccess) {
    nvml->shutdown = nullptr;  // not initialized: nothing to shut down
    return none(absl::StrCat("no NVML: nvmlInit_v2: ", nvml->Error(r)));
  }
  unsigned int count = 0;
  if (NvmlReturn r = nvml->device_count(&count); r != kNvmlSuccess) {
    return none(absl::StrCat("no NVML: nvmlDeviceGetCount_v2: ", nvml->Error(r)));
  }
  std::string problems;
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (NvmlReturn r = nvml->device_by_index(i, &device); r != kNvmlSuccess) {
      absl::StrAppend(&problems, " GPU ", i, ": ", nvml->Error(r), ";");
      continue;
    }
    unsigned long long mj = 0;
    if (nvml->total_energy != nullptr && nvml->total_energy(device, &mj) == kNvmlSuccess) {
      counters.push_back(std::make_unique<NvmlEnergyCounter>(nvml, device, i, mj));
      continue;
    }
    unsigned int mw = 0;
    if (nvml->power_usage != nullptr && nvml->power_usage(device, &mw) == kNvmlSuccess) {
      counters.push_back(std::make_unique<NvmlPowerCounter>(nvml, device, i));
      continue;
    }
    absl::StrAppend(&problems, " GPU ", i, ": neither total energy nor power is readable;");
  }
  if (counters.empty()) return none(absl::StrCat("no NVML counters: ", count, " GPUs;", problems));
  return counters;
}

}  // namespace hetero
