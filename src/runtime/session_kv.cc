#include "src/runtime/session_kv.h"

namespace hetero {

bool MoveSessionKv(DeviceRegistry& devices, SessionKv& kv, Device device) {
  if (!kv.seq.has_value() || kv.device == device) return true;
  Backend& from = devices.Worker(kv.device).backend();
  Backend& to = devices.Worker(device).backend();
  absl::StatusOr<SavedSequence> saved = from.SwapOut(*kv.seq);
  absl::StatusOr<SequenceId> moved = saved.ok() ? to.SwapIn(*saved) : saved.status();
  if (moved.ok()) {
    kv.seq = *moved;
    kv.device = device;
    return true;
  }
  if (!saved.ok()) from.FreeSequence(*kv.seq);
  kv.seq.reset();
  kv.tokens.clear();
  kv.device = device;
  return false;
}

absl::StatusOr<SequenceId> NewSessionSequence(Backend& backend, const SessionKv& kv) {
  absl::StatusOr<SequenceId> seq = backend.NewSequence();
  if (!seq.ok() || !kv.adapter.active()) return seq;
  if (absl::Status s = backend.SetSequenceAdapter(*seq, kv.adapter); !s.ok()) {
    backend.FreeSequence(*seq);
    return s;
  }
  return seq;
}

void ReleaseSessionKv(DeviceRegistry& devices, SessionKv& kv) {
  if (kv.seq.has_value()) devices.Worker(kv.device).backend().FreeSequence(*kv.seq);
  kv.seq.reset();
  kv.tokens.clear();
  kv.swapped.reset();
}

}  // namespace hetero
