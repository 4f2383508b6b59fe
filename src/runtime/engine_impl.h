// The engine's and a session's state, shared by engine.cc, session.cc and completion.cc.
#ifndef HETERO_RUNTIME_ENGINE_IMPL_H_
#define HETERO_RUNTIME_ENGINE_IMPL_H_

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hetero/engine.h"
#include "hetero/model.h"
#include "src/runtime/device_registry.h"
#include "src/runtime/energy/energy_meter.h"
#include "src/runtime/lora.h"
#include "src/runtime/placer.h"
#include "src/runtime/session_kv.h"
#include "src/runtime/stages/task_context.h"
#include "src/runtime/sync.h"
#include "src/runtime/tools/tool_prompt.h"

namespace hetero {

struct Session::State {
  std::shared_ptr<Engine::Impl> engine;
  Mutex mu;
  bool running ABSL_GUARDED_BY(mu) = false;
  std::vector<ChatMessage> messages ABSL_GUARDED_BY(mu);
  internal::GeneratedTurns generated ABSL_GUARDED_BY(mu);  // assistant turns as generated with tools
  Clock::time_point last_used ABSL_GUARDED_BY(mu);
  // Touched by the running task without the lock (running guards it), and by eviction
  // under the lock when not running.
  SessionKv kv;
  std::atomic<bool> cancelled{false};
};

struct Engine::Impl {
  EngineOptions options;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer_owned;
  std::optional<ChatTemplate> chat;
  std::shared_ptr<Scheduler> scheduler;
  Calibration calibration;
  bool calibrated = false;
  ExpertUsage loaded_expert_usage;  // EngineOptions::expert_usage_path's counts
  std::unique_ptr<DeviceRegistry> devices;
  std::unique_ptr<Placer> placer;
  std::unique_ptr<StageServices> services;
  std::unique_ptr<internal::EnergyMeter> energy;  // null when measure_energy is off
  std::atomic<uint64_t> next_task{1};
  // The vocabulary's hash for session state (session_state_io.cc), computed on first use.
  std::once_flag vocabulary_hash_once;
  uint64_t vocabulary_hash = 0;

  mutable Mutex mu;
  std::vector<std::weak_ptr<Session::State>> sessions ABSL_GUARDED_BY(mu);
  // LoRA adapters by name (Engine::LoadAdapter).
  std::map<std::string, std::shared_ptr<const LoraAdapter>> adapters ABSL_GUARDED_BY(mu);
  // The adapter of `name` with `scale`, or NotFound / InvalidArgument.
  absl::StatusOr<SequenceAdapter> FindAdapter(const std::string& name, float scale) const;

  ~Impl() {
    energy.reset();   // its thread reads the workers' busy time
    devices.reset();  // each worker joins its thread before its backend goes
  }

  // Frees the KV of idle sessions held on `device`, least recently used first, until
  // `needed` tokens are free or none is left. Runs on that device's worker thread.
  int EvictIdle(Device device, int needed) {
    std::vector<std::shared_ptr<Session::State>> idle;
    {
      MutexLock lock(&mu);
      for (auto& weak : sessions) {
        if (auto s = weak.lock()) idle.push_back(std::move(s));
      }
    }
    std::vector<std::pair<Clock::time_point, std::shared_ptr<Session::State>>> candidates;
    for (auto& s : idle) {
      MutexLock lock(&s->mu);
      if (!s->running && s->kv.seq.has_value() && s->kv.device == device) candidates.emplace_back(s->last_used, s);
    }
    std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    int freed = 0;
    for (auto& [when, s] : candidates) {
      if (freed >= needed) break;
      MutexLock lock(&s->mu);
      if (s->running || !s->kv.seq.has_value() || s->kv.device != device) continue;
      freed += static_cast<int>(s->kv.tokens.size());
      ReleaseSessionKv(*devices, s->kv);
    }
    return freed;
  }
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_ENGINE_IMPL_H_
