#include "src/runtime/device_registry.h"

namespace hetero {

DeviceRegistry::DeviceRegistry(std::vector<DeviceSlot> slots, const Tokenizer& tokenizer, int max_queued,
                               int max_batch, std::function<int(Device, int)> evict) {
  for (DeviceSlot& slot : slots) {
    EngineDevice d;
    d.id = slot.device;
    d.backend = std::move(slot.backend);
    d.unavailable_reason = std::move(slot.unavailable_reason);
    d.costs = DefaultCosts(d.id);
    if (d.backend != nullptr) {
      const Device id = d.id;
      d.worker = std::make_unique<DeviceWorker>(*d.backend, tokenizer, max_queued, max_batch,
                                                [evict, id](int tokens) { return evict(id, tokens); });
    }
    devices_.push_back(std::move(d));
  }
}

DeviceRegistry::~DeviceRegistry() {
  for (auto it = devices_.rbegin(); it != devices_.rend(); ++it) it->worker.reset();  // join before backends go
}

EngineDevice* DeviceRegistry::Find(Device id) {
  for (EngineDevice& d : devices_) {
    if (d.id == id) return d.available() ? &d : nullptr;
  }
  return nullptr;
}

const EngineDevice* DeviceRegistry::Find(Device id) const {
  return const_cast<DeviceRegistry*>(this)->Find(id);
}

DeviceWorker& DeviceRegistry::Worker(Device id) {
  EngineDevice* d = Find(id);
  return d != nullptr ? *d->worker : *cpu().worker;  // unreachable fallback: placement checked the device
}

SystemSnapshot DeviceRegistry::Snapshot(double host_device_gb_per_s, bool calibrated) const {
  SystemSnapshot s;
  for (const EngineDevice& d : devices_) {
    DeviceSnapshot ds;
    ds.device = d.id;
    ds.available = d.available();
    ds.unavailable_reason = d.unavailable_reason;
    ds.costs = d.costs;
    if (d.available()) {
      ds.name = d.backend->info().name;
      ds.can_embed = d.backend->can_embed();
      ds.can_apply_adapters = d.backend->can_apply_adapters();
      ds.queued_tasks = d.worker->queued();
      ds.active_tasks = d.worker->active();
      ds.kv_capacity_tokens = d.backend->kv_capacity_tokens();
      ds.kv_free_tokens = ds.kv_capacity_tokens - d.backend->kv_used_tokens();
      ds.kv_bytes_per_token = static_cast<int64_t>(d.backend->kv_bytes_per_token());
    }
    s.devices.push_back(std::move(ds));
  }
  s.host_device_gb_per_s = host_device_gb_per_s;
  s.calibrated = calibrated;
  return s;
}

void DeviceRegistry::PokeAll() {
  for (EngineDevice& d : devices_) {
    if (d.worker != nullptr) d.worker->Poke();
  }
}

}  // namespace hetero
