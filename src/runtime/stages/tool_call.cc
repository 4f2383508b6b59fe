#include "absl/strings/str_cat.h"
#include "src/runtime/stages/stages.h"
#include "src/runtime/status_macros.h"

namespace hetero {

absl::Status ToolCallStage::Run(TaskContext& task) {
  StageServices& services = *task.services;
  SessionKv& kv = *task.kv;
  const auto start = Clock::now();
  const Placement placement = services.Place(Stage::kToolCall, task.State());
  Backend& backend = services.Worker(kv.device).backend();

  // While the tool runs, the KV cache is kept, parked in host memory, or dropped.
  if (kv.seq.has_value()) {
    switch (placement.kv_policy) {
      case KvPolicy::kKeep:
        break;
      case KvPolicy::kSwapToHost: {
        HETERO_ASSIGN_OR_RETURN(SavedSequence saved, backend.SwapOut(*kv.seq));
        kv.seq.reset();
        kv.swapped = std::move(saved);
        break;
      }
      case KvPolicy::kDiscard:
        ReleaseSessionKv(services, kv);
        break;
    }
    if (placement.kv_policy != KvPolicy::kKeep) services.Worker(kv.device).Poke();  // memory freed
  }
  absl::StatusOr<std::vector<ChatMessage>> results = task.options->tools.run(task.reply);
  // The KV comes back before anything else can fail, so nothing leaks.
  if (kv.swapped.has_value()) {
    absl::StatusOr<SequenceId> seq = backend.SwapIn(*kv.swapped);
    kv.swapped.reset();
    if (seq.ok()) {
      kv.seq = *seq;
    } else {
      kv.tokens.clear();  // could not restore: recompute instead
    }
  }
  if (!results.ok()) {
    return absl::Status(results.status().code(), absl::StrCat("tool: ", results.status().message()));
  }
  task.messages->push_back(ChatMessage{"assistant", task.reply, {}, "", ""});
  for (ChatMessage& m : *results) task.messages->push_back(std::move(m));

  StageReport r;
  r.stage = Stage::kToolCall;
  r.device = placement.device;
  r.kv_policy = placement.kv_policy;
  r.reason = placement.reason;
  r.start_ms = task.MsSinceStart(start);
  r.end_ms = task.MsSinceStart(Clock::now());
  task.report.stages.push_back(r);
  return absl::OkStatus();
}

}  // namespace hetero
