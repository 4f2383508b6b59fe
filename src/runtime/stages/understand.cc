#include <algorithm>

#include "src/runtime/stages/stages.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/tools/tool_prompt.h"

namespace hetero {

TaskState TaskContext::State() const {
  TaskState s;
  s.task_id = task_id;
  s.prompt_tokens = static_cast<int>(prompt_tokens.size());
  s.uncached_prompt_tokens = static_cast<int>(prompt_tokens.size() - reused_tokens);
  s.max_new_tokens = options->max_tokens;
  s.generated_tokens = report.generated_tokens;
  s.kv_tokens = static_cast<int>(kv->tokens.size());
  s.kv_device = kv->device;
  s.expected_tool_seconds = options->tools.expected_seconds;
  s.latency_target_seconds = options->latency_target_seconds;
  return s;
}

void ReleaseSessionKv(StageServices& services, SessionKv& kv) {
  if (kv.seq.has_value()) services.Worker(kv.device).backend().FreeSequence(*kv.seq);
  kv.seq.reset();
  kv.tokens.clear();
  kv.swapped.reset();
}

absl::Status UnderstandStage::Run(TaskContext& task) {
  StageServices& services = *task.services;
  const auto start = Clock::now();
  std::string prompt;
  const ToolRegistry* tools = task.options->tool_registry.get();
  if (tools == nullptr) {
    HETERO_ASSIGN_OR_RETURN(prompt, services.chat_template().Render(*task.messages, {}, /*add_generation_prompt=*/true));
  } else if (internal::TemplateDescribesTools(services.chat_template(), task.tool_format)) {
    HETERO_ASSIGN_OR_RETURN(prompt, services.chat_template().Render(*task.messages, tools->Definitions(), true));
  } else {
    const std::vector<ChatMessage> shown =
        internal::MessagesWithToolPrompt(*task.messages, *tools, task.tool_format, services.chat_template());
    HETERO_ASSIGN_OR_RETURN(prompt, services.chat_template().Render(shown, {}, /*add_generation_prompt=*/true));
  }
  HETERO_ASSIGN_OR_RETURN(task.prompt_tokens, services.tokenizer().Encode(prompt, /*add_bos=*/false, /*parse_special=*/true));
  if (task.prompt_tokens.empty()) return absl::InvalidArgumentError("the conversation renders to no tokens");

  // Prefix reuse: keep the longest common prefix of what the KV holds and the new prompt,
  // always leaving at least one token to encode (its logits start generation).
  SessionKv& kv = *task.kv;
  size_t common = 0;
  if (kv.seq.has_value()) {
    const size_t limit = std::min(kv.tokens.size(), task.prompt_tokens.size() - 1);
    while (common < limit && kv.tokens[common] == task.prompt_tokens[common]) ++common;
  }
  task.reused_tokens = common;

  const Placement placement = services.Place(Stage::kUnderstand, task.State());
  task.generate_placement = services.Place(Stage::kGenerate, task.State());
  // Prefill runs where the KV will be decoded. When that device changes, the cached KV
  // moves with the session through host memory (both backends share one block layout);
  // only if the move fails is it dropped and the prompt encoded again.
  if (kv.seq.has_value() && kv.device != task.generate_placement.device) {
    Backend& from = services.Worker(kv.device).backend();
    Backend& to = services.Worker(task.generate_placement.device).backend();
    absl::StatusOr<SavedSequence> saved = from.SwapOut(*kv.seq);
    absl::StatusOr<SequenceId> moved = saved.ok() ? to.SwapIn(*saved) : saved.status();
    if (moved.ok()) {
      kv.seq = *moved;
    } else {
      if (!saved.ok()) from.FreeSequence(*kv.seq);
      kv.seq.reset();
      kv.tokens.clear();
      task.reused_tokens = 0;
    }
  }
  kv.device = task.generate_placement.device;
  Backend& backend = services.Worker(kv.device).backend();
  if (!kv.seq.has_value()) {
    HETERO_ASSIGN_OR_RETURN(SequenceId seq, backend.NewSequence());
    kv.seq = seq;
    kv.tokens.clear();
  }
  HETERO_RETURN_IF_ERROR(backend.TruncateSequence(*kv.seq, static_cast<int>(task.reused_tokens)));
  kv.tokens.resize(task.reused_tokens);

  StageReport r;
  r.stage = Stage::kUnderstand;
  r.device = placement.device;
  r.reason = placement.reason;
  r.start_ms = task.MsSinceStart(start);
  r.end_ms = task.MsSinceStart(Clock::now());  // completed by Generate once prefill ran
  r.tokens_in = static_cast<int>(task.prompt_tokens.size() - task.reused_tokens);
  task.report.stages.push_back(r);
  task.report.prompt_tokens = static_cast<int>(task.prompt_tokens.size());
  task.report.reused_prompt_tokens = static_cast<int>(task.reused_tokens);
  return absl::OkStatus();
}

}  // namespace hetero
