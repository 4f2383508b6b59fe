#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "src/runtime/stages/stages.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/tools/tool_prompt.h"

namespace hetero {

TaskState TaskContext::State() const {
  TaskState s;
  s.task_id = task_id;
  s.prompt_tokens = static_cast<int>(prompt_tokens.size());
  s.uncached_prompt_tokens = static_cast<int>(prompt_tokens.size() - reused_tokens);
  s.max_new_tokens = max_tokens();
  s.route = route;
  s.generated_tokens = report.generated_tokens;
  s.kv_tokens = static_cast<int>(kv->tokens.size());
  s.kv_device = kv->device;
  s.expected_tool_seconds = options->tools.expected_seconds;
  s.latency_target_seconds = options->latency_target_seconds;
  s.small_answer = small_answer;
  s.out_of_memory_device = out_of_memory_device;
  s.out_of_memory_message = out_of_memory_message;
  s.adapter = kv->adapter_name;
  return s;
}

absl::Status UnderstandStage::Run(TaskContext& task) {
  StageServices& services = *task.services;
  const auto start = Clock::now();
  std::string prompt;
  const ToolRegistry* tools = task.options->tool_registry.get();
  // The conversation is rendered for this run's form (its tools' format, or none), whatever
  // form earlier runs had.
  const ChatTemplate& chat = services.chat_template();
  const internal::GeneratedTurns& generated = *task.generated;
  // A reply held to a call from its first byte (tool_choice, a router's tool route) cannot
  // open with <think>: the prompt then says so, as enable_thinking=False does.
  const bool forced_call = tools != nullptr && task.tool_round == 0 && task.route_grammar != nullptr && !task.answer_only;
  const ChatRenderOptions render{task.options->enable_thinking && !forced_call};
  if (tools == nullptr) {
    HETERO_ASSIGN_OR_RETURN(prompt, chat.Render(internal::ConversationWithoutTools(*task.messages, chat), {},
                                                /*add_generation_prompt=*/true, render));
  } else if (internal::TemplateDescribesTools(chat, task.tool_format)) {
    HETERO_ASSIGN_OR_RETURN(prompt, chat.Render(internal::ConversationInToolFormat(*task.messages, generated, task.tool_format,
                                                                                   /*template_writes_calls=*/true),
                                                tools->Definitions(), true, render));
  } else {
    const std::vector<ChatMessage> shown = internal::MessagesWithToolPrompt(
        internal::ConversationInToolFormat(*task.messages, generated, task.tool_format, /*template_writes_calls=*/false),
        *tools, task.tool_format, chat);
    HETERO_ASSIGN_OR_RETURN(prompt, chat.Render(shown, {}, /*add_generation_prompt=*/true, render));
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

  // Both from one snapshot: a load change between the two must not split one task across
  // two GPUs.
  const SystemSnapshot system = services.Snapshot();
  const Placement placement = services.PlaceWith(Stage::kUnderstand, task.State(), system);
  task.generate_placement = services.PlaceWith(Stage::kGenerate, task.State(), system);
  const Device understand_device = placement.device;
  const Device generate_device = task.generate_placement.device;
  // Rule "prefill-handoff": with Understand and Generate on different devices (the seed
  // policy on a machine with a GPU), the prompt but its last token is encoded where
  // Understand runs and its KV then handed to the Generate device, which encodes the last
  // token (its logits start generation) and decodes. Otherwise (or with one token to encode)
  // the whole prompt is encoded where Generate runs.
  const bool split = understand_device != generate_device && task.prompt_tokens.size() - common > 1;
  std::string handoff;
  if (understand_device != generate_device && !split) {
    handoff = absl::StrCat("; rule prefill-handoff: one token to encode, encoded on the ", DeviceName(generate_device));
  }
  if (kv.seq.has_value() && !MoveSessionKv(services.devices(), kv, split ? understand_device : generate_device)) {
    task.reused_tokens = 0;  // the move failed: the cache was dropped, encode again
  }
  kv.device = split ? understand_device : generate_device;
  Backend& backend = services.Worker(kv.device).backend();
  if (!kv.seq.has_value()) {
    HETERO_ASSIGN_OR_RETURN(SequenceId seq, NewSessionSequence(backend, kv));
    kv.seq = seq;
    kv.tokens.clear();
  }
  HETERO_RETURN_IF_ERROR(backend.TruncateSequence(*kv.seq, static_cast<int>(task.reused_tokens)));
  kv.tokens.resize(task.reused_tokens);
  const size_t reused_own = task.reused_tokens;
  // Blocks other sessions encoded for the same next tokens (a shared system prompt), still
  // leaving the last token to encode.
  HETERO_ASSIGN_OR_RETURN(const int shared, backend.AttachCachedPrefix(*kv.seq, task.prompt_tokens,
                                                                       static_cast<int>(task.prompt_tokens.size()) - 1));
  task.reused_tokens += static_cast<size_t>(shared);
  kv.tokens.assign(task.prompt_tokens.begin(), task.prompt_tokens.begin() + task.reused_tokens);
  const size_t encoded_here = task.prompt_tokens.size() - task.reused_tokens;

  StageReport r;
  if (split) {
    auto job = std::make_shared<GenerationJob>();
    job->seq = *kv.seq;
    job->prefill_tokens.assign(task.prompt_tokens.begin() + task.reused_tokens, task.prompt_tokens.end() - 1);
    job->max_tokens = 0;  // prefill only
    job->deadline = task.deadline;
    job->cancelled = task.cancelled;
    if (!job->prefill_tokens.empty()) {  // else shared blocks held all of it
      DeviceWorker& worker = services.Worker(kv.device);
      HETERO_RETURN_IF_ERROR(worker.Submit(job));
      worker.Wait(job);
      ReportExpertTraffic(*job, &r, nullptr);
      kv.tokens.insert(kv.tokens.end(), job->prefill_tokens.begin(),
                       job->prefill_tokens.begin() + job->kv_tokens_appended);
      if (!job->status.ok()) return absl::Status(job->status.code(), job->status.message());
    }
    task.reused_tokens = kv.tokens.size();  // Generate encodes only the last token
    const auto moved_at = Clock::now();
    if (MoveSessionKv(services.devices(), kv, generate_device)) {
      handoff = absl::StrFormat("; rule prefill-handoff: KV handed to the %s in %.2f ms", DeviceName(generate_device),
                                std::chrono::duration<double, std::milli>(Clock::now() - moved_at).count());
    } else {
      handoff = absl::StrCat("; rule prefill-handoff: KV handoff to the ", DeviceName(generate_device),
                             " failed, prompt encoded again there");
      task.reused_tokens = 0;
    }
    kv.device = generate_device;
    Backend& generate_backend = services.Worker(kv.device).backend();
    if (!kv.seq.has_value()) {
      HETERO_ASSIGN_OR_RETURN(SequenceId seq, NewSessionSequence(generate_backend, kv));
      kv.seq = seq;
      kv.tokens.clear();
    }
  }

  r.stage = Stage::kUnderstand;
  // The device that encoded the prompt (where Generate runs, unless split above).
  r.device = split ? understand_device : generate_device;
  r.reason = absl::StrCat(placement.reason, handoff);
  r.start_ms = task.MsSinceStart(start);
  r.end_ms = task.MsSinceStart(Clock::now());  // completed by Generate once prefill ran
  r.tokens_in = static_cast<int>(encoded_here);
  task.report.stages.push_back(r);
  task.report.prompt_tokens = static_cast<int>(task.prompt_tokens.size());
  task.report.reused_prompt_tokens = static_cast<int>(reused_own);
  task.report.shared_prompt_tokens = shared;
  return absl::OkStatus();
}

}  // namespace hetero
