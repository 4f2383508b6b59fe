// Session: one conversation's runs, through the stages (Understand, Generate, ToolCall).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "hetero/engine.h"
#include "src/runtime/chat/reasoning_stream.h"
#include "src/runtime/engine_impl.h"
#include "src/runtime/stages/stages.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/test_hooks.h"
#include "src/runtime/tools/json_schema.h"
#include "src/runtime/tools/tool_call_constraint.h"
#include "src/runtime/tools/tool_prompt.h"

namespace hetero {

namespace {

// Joules for each stage of a finished task, and the task's totals.
void AttributeEnergy(internal::EnergyMeter& meter, TaskContext& task) {
  std::vector<internal::StageWindow> windows;
  for (size_t i = 0; i < task.report.stages.size(); ++i) {
    const StageReport& r = task.report.stages[i];
    const auto at = [&](double ms) {
      return task.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
    };
    windows.push_back({task.task_id, static_cast<int>(i), r.device, at(r.start_ms), at(r.end_ms)});
  }
  const std::vector<internal::StageEnergy> energy = meter.AttributeTask(windows);
  double total = 0;
  bool estimated = false;
  for (size_t i = 0; i < energy.size() && i < task.report.stages.size(); ++i) {
    StageReport& r = task.report.stages[i];
    r.joules = energy[i].device_joules + energy[i].idle_joules;
    r.idle_joules = energy[i].idle_joules;
    r.joules_estimated = energy[i].interpolated || meter.estimated(r.device);
    total += r.joules;
    estimated |= r.joules_estimated;
  }
  task.report.joules = total;
  task.report.tokens_per_joule = total > 0 ? task.report.generated_tokens / total : 0;
  task.report.energy_estimated = estimated;
  task.report.energy_sources = meter.sources();
}

// A stage boundary: the test hook (fault injection), then cancellation and the deadline,
// so that a task cancelled between stages stops there rather than at its next decode step.
absl::Status AtStageBoundary(const TaskContext& task, Stage stage, bool begin) {
  if (const std::shared_ptr<const internal::TestHooks> hooks = internal::CurrentTestHooks();
      hooks != nullptr && hooks->stage_boundary) {
    hooks->stage_boundary(task.task_id, stage, begin);
  }
  if (task.cancelled != nullptr && task.cancelled->load()) {
    return absl::CancelledError(absl::StrCat("task cancelled ", begin ? "before" : "after", " its ",
                                             std::string(StageName(stage)), " stage"));
  }
  if (task.deadline.has_value() && Clock::now() >= *task.deadline) return absl::DeadlineExceededError("task deadline passed");
  return absl::OkStatus();
}

// Runs `stage` between its two boundaries.
template <typename StageBody>
absl::Status RunStage(TaskContext& task, Stage stage, StageBody body) {
  HETERO_RETURN_IF_ERROR(AtStageBoundary(task, stage, /*begin=*/true));
  HETERO_RETURN_IF_ERROR(body());
  return AtStageBoundary(task, stage, /*begin=*/false);
}

}  // namespace

Session::~Session() {
  Cancel();
  State& s = *state_;
  {
    MutexLock lock(&s.mu);  // a Run in progress holds `running`; wait for it is the caller's job
    if (!s.running) ReleaseSessionKv(*s.engine->devices, s.kv);
  }
  s.engine->devices->PokeAll();
}

void Session::Cancel() {
  state_->cancelled = true;
  state_->engine->devices->PokeAll();
}

std::vector<ChatMessage> Session::messages() const {
  MutexLock lock(&state_->mu);
  return state_->messages;
}

int Session::kv_tokens() const {
  MutexLock lock(&state_->mu);
  return state_->kv.seq.has_value() ? static_cast<int>(state_->kv.tokens.size()) : 0;
}

absl::StatusOr<RunResult> Session::Run(const std::string& user_message, const RunOptions& options) {
  return RunTurn(&user_message, options);
}

absl::StatusOr<RunResult> Session::Continue(const RunOptions& options) { return RunTurn(nullptr, options); }

absl::StatusOr<RunResult> Session::RunTurn(const std::string* user_message, const RunOptions& options) {
  State& s = *state_;
  for (size_t i = 0; i < options.stop.size(); ++i) {
    // An empty stop string would match at once and end every reply before it starts.
    if (options.stop[i].empty()) return absl::InvalidArgumentError(absl::StrCat("RunOptions::stop[", i, "] is empty"));
  }
  if (options.logprobs < -1 || options.logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunOptions::logprobs is ", options.logprobs, ", expected -1 (off) or 0 to ", kMaxTopLogprobs));
  }
  if (options.tool_registry == nullptr && (options.return_tool_calls || options.tool_choice != RunOptions::ToolChoice::kAuto)) {
    return absl::InvalidArgumentError("RunOptions::return_tool_calls and tool_choice need a tool_registry");
  }
  if (options.tool_choice != RunOptions::ToolChoice::kAuto && !options.constrain_tool_calls) {
    return absl::InvalidArgumentError("RunOptions::tool_choice required or named needs constrain_tool_calls");
  }
  if (options.tool_choice == RunOptions::ToolChoice::kNamed &&
      options.tool_registry->Find(options.tool_choice_name) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunOptions::tool_choice_name '", options.tool_choice_name, "' is not a registered tool"));
  }
  if (options.max_parallel_calls < 0) return absl::InvalidArgumentError("RunOptions::max_parallel_calls is negative");
  std::shared_ptr<const internal::Grammar> response_grammar;
  if (!options.response_schema_json.empty()) {
    if (options.tool_registry != nullptr) {
      return absl::UnimplementedError(
          "RunOptions::response_schema_json with a tool_registry: a schema for the agent loop's final answer is not "
          "implemented; run the tools, then ask for the structured answer in a run without tools");
    }
    // Compile refuses a root that is not an object, as OpenAI's structured outputs do.
    HETERO_ASSIGN_OR_RETURN(std::unique_ptr<internal::CompiledSchema> schema,
                            internal::CompiledSchema::Compile(options.response_schema_json, "response schema"));
    response_grammar = internal::Grammar::ForSchema(schema->root());  // the grammar copies what it needs
  }
  std::vector<ChatMessage> messages;
  internal::GeneratedTurns generated;
  {
    MutexLock lock(&s.mu);
    if (s.running) return absl::FailedPreconditionError("a Run is already in progress on this session");
    s.running = true;
    s.cancelled = false;
    messages = s.messages;
    generated = s.generated;
  }
  if (user_message != nullptr) {
    messages.push_back(ChatMessage{"user", *user_message, {}, "", ""});
  } else if (messages.empty() || messages.back().role == "assistant" || messages.back().role == "system") {
    MutexLock lock(&s.mu);
    s.running = false;
    return absl::FailedPreconditionError(
        "Continue: the conversation must end with a user turn or a tool result for the assistant to answer");
  }
  // Reasoning templates stream each reply apart: <think> text to on_reasoning, the answer to
  // on_text.
  const bool split_reasoning = s.engine->chat->supports_reasoning();
  RunOptions split_options;
  std::shared_ptr<internal::ReasoningStream> reasoning_stream;
  if (split_reasoning && (options.on_text || options.on_reasoning)) {
    split_options = options;
    reasoning_stream = std::make_shared<internal::ReasoningStream>(options.on_reasoning, options.on_text);
    split_options.on_text = [reasoning_stream](std::string_view piece) { return reasoning_stream->Push(piece); };
  }
  TaskContext task;
  task.services = s.engine->services.get();
  task.task_id = s.engine->next_task++;
  task.start = Clock::now();
  task.options = reasoning_stream != nullptr ? &split_options : &options;
  if (options.timeout.count() > 0) task.deadline = task.start + options.timeout;
  task.cancelled = &s.cancelled;
  task.messages = &messages;
  task.generated = &generated;
  task.kv = &s.kv;

  const ToolRegistry* registry = options.tool_registry.get();
  task.response_grammar = std::move(response_grammar);
  std::shared_ptr<const internal::Grammar> forced_calls;  // tool_choice required or named
  if (registry != nullptr) {
    task.tool_format = internal::ResolveToolFormat(*s.engine->chat, options.tool_format);
    task.report.tool_format = std::string(ToolCallFormatName(task.tool_format));
    if (options.constrain_tool_calls) {
      std::vector<std::string> names;
      std::vector<const internal::SchemaNode*> schemas;
      for (size_t i = 0; i < registry->size(); ++i) {
        names.push_back(registry->tool(i).name);
        schemas.push_back(&registry->schema(i).root());
      }
      if (task.tool_format == ToolCallFormat::kGeneric) task.answer_grammar = internal::Grammar::GenericReply({}, {});
      const int max_calls = options.max_parallel_calls > 0 ? options.max_parallel_calls : 4;
      task.tool_grammar = internal::ToolCallGrammar(task.tool_format, names, schemas, max_calls, /*calls_only=*/false);
      if (options.tool_choice != RunOptions::ToolChoice::kAuto) {
        std::vector<std::string> chosen_names;
        std::vector<const internal::SchemaNode*> chosen_schemas;
        for (size_t i = 0; i < names.size(); ++i) {
          if (options.tool_choice == RunOptions::ToolChoice::kNamed && names[i] != options.tool_choice_name) continue;
          chosen_names.push_back(names[i]);
          chosen_schemas.push_back(schemas[i]);
        }
        forced_calls =
            internal::ToolCallGrammar(task.tool_format, chosen_names, chosen_schemas, max_calls, /*calls_only=*/true);
      }
    }
  }

  // The gate reads the new user text; a continued conversation brings none.
  absl::Status status = user_message != nullptr ? RunUnderstandGate(task, *user_message, registry) : absl::OkStatus();
  // tool_choice holds the first reply to calls, whatever the router's route said.
  if (forced_calls != nullptr) task.route_grammar = std::move(forced_calls);
  std::vector<ToolCall> returned_calls;
  std::string answer;
  std::string reasoning;  // reasoning templates: the final reply's <think> text
  std::vector<std::string> earlier_calls;  // name + arguments of every call so far
  if (status.ok() && task.refusal.has_value()) {
    answer = *task.refusal;  // refused before any Generate work
    messages.push_back(ChatMessage{"assistant", answer});
  }
  for (int round = 0; status.ok() && !task.refusal.has_value(); ++round) {
    task.tool_round = round;
    if (reasoning_stream != nullptr) reasoning_stream->Reset();  // each round's reply opens its own <think>
    // The last round must answer; so must a round after one that only repeated calls (a
    // small model's loop). Only the generic format can be held to that by its grammar.
    if (round == options.max_tool_rounds) task.answer_only = true;
    const size_t stages_before = task.report.stages.size();
    const int generated_before = task.report.generated_tokens;
    status = RunStage(task, Stage::kUnderstand, [&] { return UnderstandStage().Run(task); });
    if (status.ok()) status = RunStage(task, Stage::kGenerate, [&] { return GenerateStage().Run(task); });
    if (!status.ok() && status.code() == absl::StatusCode::kResourceExhausted && task.kv->device != Device::kCpu &&
        !task.out_of_memory_device.has_value() && task.report.generated_tokens == generated_before) {
      // The device ran out of memory for this task (its KV, or a buffer) before any text of
      // this round was shown: the round is placed again, knowing that (rule "out-of-memory").
      task.out_of_memory_device = task.kv->device;
      task.out_of_memory_message = std::string(status.message());
      ReleaseSessionKv(*s.engine->devices, s.kv);
      task.report.stages.resize(stages_before);
      status = RunStage(task, Stage::kUnderstand, [&] { return UnderstandStage().Run(task); });
      if (status.ok()) status = RunStage(task, Stage::kGenerate, [&] { return GenerateStage().Run(task); });
    }
    if (!status.ok()) break;
    bool tool;
    if (registry != nullptr) {
      tool = task.parsed.is_tool_call();
      if (tool && round >= options.max_tool_rounds) {
        task.report.stop_reason = "max_tool_rounds";
        tool = false;
      }
      answer = task.parsed.text;
      bool all_repeated = tool;
      for (const ParsedToolCall& call : task.parsed.calls) {
        const std::string key = call.name + call.arguments_json;
        if (std::find(earlier_calls.begin(), earlier_calls.end(), key) == earlier_calls.end()) {
          all_repeated = false;
          earlier_calls.push_back(key);
        }
      }
      if (all_repeated) task.answer_only = true;
    } else {
      tool = options.tools.is_tool_call && options.tools.run && round < options.max_tool_rounds &&
             options.tools.is_tool_call(task.reply);
      answer = task.reply;
    }
    if (tool && options.return_tool_calls) {
      // The caller runs the tools: the turn joins the conversation with its calls, as the
      // ToolCall stage would have added it, and the run ends here.
      ChatMessage turn{"assistant", task.parsed.text};
      for (size_t i = 0; i < task.parsed.calls.size(); ++i) {
        const ParsedToolCall& call = task.parsed.calls[i];
        if (!call.error.empty()) continue;
        turn.tool_calls.push_back({absl::StrCat("call_", round, "_", i), call.name, call.arguments_json});
        if (task.tool_format == ToolCallFormat::kLlama3) break;  // one call per Llama 3.1 turn
      }
      if (split_reasoning) {
        SplitReply split = SplitReasoning(turn.content);
        turn.content = split.answer;
        turn.reasoning_content = reasoning = split.reasoning;
      }
      returned_calls = turn.tool_calls;
      generated[messages.size()] = {task.tool_format, task.reply};
      answer = turn.content;
      messages.push_back(std::move(turn));
      task.report.stop_reason = "tool_calls";
      break;
    }
    if (!tool) {
      // With tools, the conversation keeps the answer, not the reply format around it; the
      // reply as generated is kept aside for later runs in the same format.
      if (registry != nullptr) generated[messages.size()] = {task.tool_format, task.reply};
      ChatMessage turn{"assistant", answer};  // without tools, the reply itself
      if (split_reasoning) {
        SplitReply split = SplitReasoning(answer);
        turn.content = answer = split.answer;
        turn.reasoning_content = reasoning = split.reasoning;
      }
      messages.push_back(std::move(turn));
      break;
    }
    status = RunStage(task, Stage::kToolCall, [&] { return ToolCallStage().Run(task); });
    if (!status.ok()) break;
    if (task.refusal.has_value()) {  // a tool result the safety gate refuses to show the model
      answer = *task.refusal;
      messages.push_back(ChatMessage{"assistant", answer});
      break;
    }
  }
  task.report.total_ms = task.MsSinceStart(Clock::now());
  if (status.ok() && s.engine->energy != nullptr) AttributeEnergy(*s.engine->energy, task);

  {
    MutexLock lock(&s.mu);
    s.running = false;
    s.last_used = Clock::now();
    if (!status.ok()) {
      // A cancelled, expired or failed task releases its KV memory; the conversation is kept
      // as it was before this Run.
      ReleaseSessionKv(*s.engine->devices, s.kv);
    } else {
      s.messages = std::move(messages);
      s.generated = std::move(generated);
    }
  }
  // The session's KV is now free or evictable: a job waiting for memory may go.
  s.engine->devices->PokeAll();
  if (!status.ok()) return status;
  return RunResult{answer, std::move(reasoning), std::move(task.report), std::move(task.token_logprobs),
                   std::move(returned_calls)};
}

}  // namespace hetero
