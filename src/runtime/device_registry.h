// The engine's devices: every backend the backend registration created (the CPU first, then
// each GPU), each with its worker thread, or the reason it is unavailable. The runtime finds a
// device here by its id; it never names a concrete backend.
#ifndef HETERO_RUNTIME_DEVICE_REGISTRY_H_
#define HETERO_RUNTIME_DEVICE_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/scheduler.h"
#include "src/runtime/backend.h"
#include "src/runtime/device_worker.h"

namespace hetero {

class Model;

// What the engine asks of every backend it creates.
struct BackendRequest {
  int cpu_threads = 1;
  CpuPrecision cpu_precision = CpuPrecision::kAuto;
  int max_sequences = 64;
  int kv_block_tokens = 16;  // one block layout on every device, so KV moves between them as is
  int kv_capacity_tokens = 0;
  bool share_kv_prefixes = true;
  // EngineOptions::gpu_memory_budget_bytes, and the policy that places a mixture-of-experts
  // model's experts within it (the engine's scheduler).
  uint64_t gpu_memory_budget_bytes = 0;
  std::function<absl::StatusOr<ExpertPlacement>(const ExpertPlacementFacts&)> place_experts;
  ExpertUsage expert_usage;  // EngineOptions::expert_usage_path's counts, checked against the model
};

// A device as the backend registration found it: a backend, or why there is none.
struct DeviceSlot {
  Device device;
  std::unique_ptr<Backend> backend;  // null: unavailable
  std::string unavailable_reason;
};

// Implemented by the backend registration (src/backends/), the one place that knows the
// concrete backends: the CPU, then each GPU the CUDA module finds (or a test's stand-ins).
// The CPU is always first and always available.
absl::StatusOr<std::vector<DeviceSlot>> CreateDeviceBackends(const Model& model, const BackendRequest& request);

struct EngineDevice {
  Device id;
  std::unique_ptr<Backend> backend;       // null when unavailable
  std::unique_ptr<DeviceWorker> worker;   // null when unavailable
  std::string unavailable_reason;
  DeviceCosts costs;
  bool available() const { return backend != nullptr; }
};

class DeviceRegistry {
 public:
  // `evict(device, tokens)` frees KV of idle sessions on `device` (DeviceWorker's callback).
  DeviceRegistry(std::vector<DeviceSlot> slots, const Tokenizer& tokenizer, int max_queued, int max_batch,
                 std::function<int(Device, int)> evict);
  ~DeviceRegistry();  // workers stop before their backends go

  // The device with this id, or null when the engine has none such (or it is unavailable).
  EngineDevice* Find(Device id);
  const EngineDevice* Find(Device id) const;
  // The CPU (always present).
  EngineDevice& cpu() { return devices_.front(); }
  // An available device's worker; the placement rules guarantee the device exists.
  DeviceWorker& Worker(Device id);
  const std::vector<EngineDevice>& devices() const { return devices_; }
  std::vector<EngineDevice>& devices() { return devices_; }

  // Every device's state for the scheduler.
  SystemSnapshot Snapshot(double host_device_gb_per_s, bool calibrated) const;
  // Wakes every worker (a session released KV memory, or was cancelled).
  void PokeAll();

 private:
  std::vector<EngineDevice> devices_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_DEVICE_REGISTRY_H_
