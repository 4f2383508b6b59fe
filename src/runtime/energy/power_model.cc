// The stated power model for devices without an energy counter.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "hetero/energy.h"
#include "nlohmann/json.hpp"

namespace hetero {
namespace {

class PowerModelCounter : public EnergyCounter {
 public:
  PowerModelCounter(Device device, PowerModel model, std::function<double()> busy_seconds)
      : device_(device), model_(model), busy_seconds_(std::move(busy_seconds)),
        start_(std::chrono::steady_clock::now()) {}

  std::string name() const override { return absl::StrCat("model:", std::string(DeviceName(device_))); }
  Device device() const override { return device_; }
  bool estimated() const override { return true; }

  absl::StatusOr<double> ReadJoules() override {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double busy = std::clamp(busy_seconds_ ? busy_seconds_() : 0.0, 0.0, elapsed);
    return model_.idle_watts * elapsed + model_.active_watts * busy;
  }

 private:
  Device device_;
  PowerModel model_;
  std::function<double()> busy_seconds_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

PowerModel DefaultPowerModel(Device device) {
  // Stated, not measured (docs/METRICS.md): a server CPU socket's share for a few cores,
  // and an H100/H200-class GPU's idle and typical decode draw.
  if (device.is_gpu()) return {70.0, 280.0};
  return {10.0, 25.0};
}

absl::StatusOr<std::vector<std::pair<Device, PowerModel>>> LoadPowerModels(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("power model file '", path, "' cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  std::vector<std::pair<Device, PowerModel>> models;
  for (Device device : {Device::kCpu, Device::kGpu}) {
    PowerModel model = DefaultPowerModel(device);
    const std::string key(DeviceName(device));
    if (j.contains(key)) {
      const nlohmann::json& d = j[key];
      if (!d.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": '", key, "' must be an object"));
      for (const char* field : {"idle_watts", "active_watts"}) {
        if (!d.contains(field)) continue;
        if (!d[field].is_number() || d[field].get<double>() < 0 || d[field].get<double>() > 5000) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ".", field, " must be a number of watts in [0, 5000]"));
        }
        (std::string(field) == "idle_watts" ? model.idle_watts : model.active_watts) = d[field].get<double>();
      }
    }
    for (const auto& item : j.items()) {
      if (item.key() != "cpu" && item.key() != "gpu") {
        return absl::InvalidArgumentError(absl::StrCat(path, ": unknown device '", item.key(), "' (cpu, gpu)"));
      }
    }
    models.emplace_back(device, model);
  }
  return models;
}

std::unique_ptr<EnergyCounter> MakePowerModelCounter(Device device, PowerModel model,
                                                     std::function<double()> busy_seconds) {
  return std::make_unique<PowerModelCounter>(device, model, std::move(busy_seconds));
}

}  // namespace hetero
