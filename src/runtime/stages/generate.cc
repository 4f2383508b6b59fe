#include "src/runtime/stages/stages.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/tools/reply_stream.h"

namespace hetero {

absl::Status GenerateStage::Run(TaskContext& task) {
  StageServices& services = *task.services;
  SessionKv& kv = *task.kv;
  DeviceWorker& worker = services.Worker(kv.device);
  auto job = std::make_shared<GenerationJob>();
  job->seq = *kv.seq;
  job->prefill_tokens.assign(task.prompt_tokens.begin() + task.reused_tokens, task.prompt_tokens.end());
  job->history = task.prompt_tokens;
  HETERO_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(task.options->sampling));
  job->sampler.emplace(std::move(sampler));
  job->max_tokens = task.max_tokens();
  job->ignore_end_of_generation = task.options->ignore_end_of_generation;
  job->stop_strings = task.options->stop;
  job->logprobs = task.options->logprobs;
  job->on_text = task.options->on_text;
  job->on_token = task.options->on_token;
  if (task.options->tool_registry != nullptr) {
    // The user sees only answer text, never tool-call markup.
    auto stream = std::make_shared<internal::ReplyStream>(task.tool_format, task.options->on_text);
    job->on_text = [stream](std::string_view piece) { return stream->Push(piece); };
    // The route's grammar (tool_choice required or named, a router's tool route) holds the
    // first reply to calls; in Hermes and Llama 3.1 the constraint must then open one.
    const bool forced = !(task.answer_only && task.answer_grammar != nullptr) && task.tool_round == 0 &&
                        task.route_grammar != nullptr;
    const std::shared_ptr<const internal::Grammar>& grammar =
        task.answer_only && task.answer_grammar != nullptr ? task.answer_grammar
        : forced                                           ? task.route_grammar
                                                           : task.tool_grammar;
    if (grammar != nullptr) {
      job->constraint =
          std::make_unique<internal::ToolCallConstraint>(services.vocab_bytes(), grammar, task.tool_format, forced);
    }
  } else if (task.response_grammar != nullptr) {
    // The generic format's constraint holds the whole reply, from its first byte, to one value.
    job->constraint = std::make_unique<internal::ToolCallConstraint>(services.vocab_bytes(), task.response_grammar,
                                                                     ToolCallFormat::kGeneric);
  }
  job->deadline = task.deadline;
  job->cancelled = task.cancelled;
  HETERO_RETURN_IF_ERROR(worker.Submit(job));
  worker.Wait(job);

  // What the KV now holds: the prompt, then every token fed back for decoding.
  kv.tokens = task.prompt_tokens;
  const int fed_generated = job->kv_tokens_appended - static_cast<int>(job->prefill_tokens.size());
  if (fed_generated > 0) kv.tokens.insert(kv.tokens.end(), job->generated.begin(), job->generated.begin() + fed_generated);
  if (job->kv_tokens_appended < static_cast<int>(job->prefill_tokens.size())) {
    kv.tokens.resize(task.reused_tokens + job->kv_tokens_appended);  // a prefill that failed part way
  }

  // Complete the Understand report with the prefill the worker did, then report Generate.
  StageReport& understand = task.report.stages.back();
  if (job->prefill_end != Clock::time_point{}) {
    understand.start_ms = std::min(understand.start_ms, task.MsSinceStart(job->prefill_start));
    understand.end_ms = task.MsSinceStart(job->prefill_end);
  }
  StageReport r;
  r.stage = Stage::kGenerate;
  r.device = kv.device;
  r.reason = task.generate_placement.reason;
  r.start_ms = job->prefill_end != Clock::time_point{} ? task.MsSinceStart(job->prefill_end) : understand.end_ms;
  r.end_ms = task.MsSinceStart(job->finished);
  r.tokens_in = std::max(0, fed_generated);
  r.tokens_out = static_cast<int>(job->generated.size());
  ReportExpertTraffic(*job, &understand, &r);
  task.report.stages.push_back(r);
  task.report.generated_tokens += r.tokens_out;
  task.report.constraint_ms += static_cast<double>(job->constraint_ns) / 1e6;
  task.report.constraint_masked_steps += job->constraint_masked_steps;
  task.report.stop_reason = job->stop_reason;
  if (task.report.time_to_first_token_ms == 0 && job->first_token != Clock::time_point{}) {
    task.report.time_to_first_token_ms = task.MsSinceStart(job->first_token);
  }
  // A fresh Status, not a copy: a copy shares its message with the job's, whose last
  // reference the worker thread may drop at any time, and the shared count lives in
  // Debian's (uninstrumented) Abseil, where ThreadSanitizer cannot see it synchronise.
  if (!job->status.ok()) return absl::Status(job->status.code(), job->status.message());
  task.reply = job->text;
  task.token_logprobs = std::move(job->token_logprobs);  // the last Generate's, as RunResult says
  if (task.options->tool_registry != nullptr) task.parsed = ParseToolCalls(task.reply, task.tool_format);
  return absl::OkStatus();
}

}  // namespace hetero
