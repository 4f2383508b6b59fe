// A session's KV state (which device's sequence holds which tokens) and the two moves on it
// that the stages and the engine share: hand it to another device through host memory, or
// release it.
#ifndef HETERO_RUNTIME_SESSION_KV_H_
#define HETERO_RUNTIME_SESSION_KV_H_

#include <optional>
#include <string>
#include <vector>

#include "hetero/scheduler.h"
#include "src/runtime/backend.h"
#include "src/runtime/device_registry.h"

namespace hetero {

struct SessionKv {
  Device device = Device::kCpu;
  std::optional<SequenceId> seq;         // none: nothing cached
  std::vector<int32_t> tokens;           // the tokens that sequence holds
  std::optional<SavedSequence> swapped;  // KV parked in host memory during a tool call
  // The LoRA adapter (Session::SetAdapter) the session's sequences are created with; the
  // name as the engine knows it, empty without one.
  std::string adapter_name;
  SequenceAdapter adapter;
};

// A new, empty sequence on `backend` with the session's adapter.
absl::StatusOr<SequenceId> NewSessionSequence(Backend& backend, const SessionKv& kv);

// Moves the cached KV to `device` through host memory (every backend keeps one block
// layout, src/runtime/kv_layout.h). False when the move failed and the cache was dropped.
bool MoveSessionKv(DeviceRegistry& devices, SessionKv& kv, Device device);

// Releases whatever KV the session holds (after cancellation, errors or eviction).
void ReleaseSessionKv(DeviceRegistry& devices, SessionKv& kv);

}  // namespace hetero

#endif  // HETERO_RUNTIME_SESSION_KV_H_
