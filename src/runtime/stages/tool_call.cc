#include "absl/strings/str_cat.h"
#include "src/runtime/stages/stages.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/tools/tool_runner.h"

namespace hetero {

namespace {

// The messages the tool round adds: the assistant's turn with its calls, then one result
// per call (the registry's agent loop), or whatever the caller's ToolHandler returns.
absl::StatusOr<std::vector<ChatMessage>> RunTools(TaskContext& task) {
  std::vector<ChatMessage> out;
  const RunOptions& options = *task.options;
  if (options.tool_registry == nullptr) {
    HETERO_ASSIGN_OR_RETURN(std::vector<ChatMessage> results, options.tools.run(task.reply));
    out.push_back(ChatMessage{"assistant", task.reply});
    for (ChatMessage& m : results) out.push_back(std::move(m));
    return out;
  }
  std::vector<internal::ToolRunResult> runs = internal::RunToolCalls(
      *options.tool_registry, task.parsed.calls, task.tool_round, options.max_tool_result_bytes, task.cancelled);
  if (task.cancelled != nullptr && task.cancelled->load()) return absl::CancelledError("cancelled during a tool call");
  // The turn's text and calls, in no format's syntax (the conversation renders them for each
  // run); the reply as generated is kept aside by the caller.
  ChatMessage assistant{"assistant", task.parsed.text};
  for (size_t i = 0; i < task.parsed.calls.size(); ++i) {
    const ParsedToolCall& call = task.parsed.calls[i];
    if (!call.error.empty()) continue;
    assistant.tool_calls.push_back({absl::StrCat("call_", task.tool_round, "_", i), call.name, call.arguments_json});
    if (task.tool_format == ToolCallFormat::kLlama3) break;  // one call per Llama 3.1 turn
  }
  out.push_back(std::move(assistant));
  const SafetyGate* safety = options.safety.get();
  for (size_t i = 0; i < runs.size(); ++i) {
    if (safety != nullptr) {
      // Instruction-like text in a result is aimed at the model, not the user's question.
      InjectionScan scan = safety->ScanToolResult(runs[i].content);
      if (scan.flagged) {
        runs[i].report.injection_flagged = true;
        runs[i].report.injection_marker = scan.marker;
        if (safety->rules().tool_results == InjectionPolicy::kStrip) runs[i].content = std::move(scan.stripped);
        if (safety->rules().tool_results == InjectionPolicy::kRefuse && !task.refusal.has_value()) {
          task.refusal = safety->rules().refusal;
          task.report.refused_by = absl::StrCat("tool result injection: ", scan.marker);
        }
      }
    }
    ChatMessage result{"tool", runs[i].content};
    result.tool_call_id = absl::StrCat("call_", task.tool_round, "_", i);
    result.name = task.parsed.calls[i].name;
    out.push_back(std::move(result));
    task.report.tool_calls.push_back(std::move(runs[i].report));
  }
  return out;
}

}  // namespace

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
        ReleaseSessionKv(services.devices(), kv);
        break;
    }
    if (placement.kv_policy != KvPolicy::kKeep) services.Worker(kv.device).Poke();  // memory freed
  }
  absl::StatusOr<std::vector<ChatMessage>> results = RunTools(task);
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
  if (task.options->tool_registry != nullptr) {
    (*task.generated)[task.messages->size()] = {task.tool_format, task.reply};  // the assistant turn, first
  }
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
