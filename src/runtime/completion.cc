// Engine::Complete: a raw prompt continued through the engine's one decode loop (the device
// worker), on the device the scheduler places Generate on.
#include "absl/strings/str_cat.h"
#include "hetero/engine.h"
#include "src/runtime/engine_impl.h"
#include "src/runtime/status_macros.h"

namespace hetero {

namespace {

double Ms(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double, std::milli>(to - from).count(); }

}  // namespace

absl::StatusOr<CompletionResult> Engine::Complete(const std::string& prompt, const CompletionOptions& options) {
  const Tokenizer& tokenizer = *impl_->tokenizer_owned;
  const bool bos = options.add_bos && tokenizer.add_bos_by_default() && tokenizer.bos() >= 0;
  HETERO_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(prompt, bos, options.parse_special));
  return CompleteTokens(ids, options);
}

absl::StatusOr<CompletionResult> Engine::CompleteTokens(const std::vector<int32_t>& prompt,
                                                        const CompletionOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("Complete: the prompt has no tokens");
  if (options.max_tokens < 1) return absl::InvalidArgumentError("CompletionOptions::max_tokens must be at least 1");
  for (size_t i = 0; i < options.stop.size(); ++i) {
    if (options.stop[i].empty()) return absl::InvalidArgumentError(absl::StrCat("CompletionOptions::stop[", i, "] is empty"));
  }
  if (options.logprobs < -1 || options.logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("CompletionOptions::logprobs is ", options.logprobs,
                                                   ", expected -1 (off) or 0 to ", kMaxTopLogprobs));
  }
  const int vocab = impl_->tokenizer_owned->vocab_size();
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("Complete: prompt token ", i, " is ", prompt[i],
                                                     ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  HETERO_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(options.sampling));
  SessionKv kv;  // the completion's sequence: its adapter
  HETERO_ASSIGN_OR_RETURN(kv.adapter, impl_->FindAdapter(options.adapter, options.adapter_scale));
  kv.adapter_name = options.adapter;
  const Clock::time_point start = Clock::now();
  TaskState state;
  state.task_id = impl_->next_task++;
  state.prompt_tokens = static_cast<int>(prompt.size());
  state.uncached_prompt_tokens = state.prompt_tokens;
  state.max_new_tokens = options.max_tokens;
  state.adapter = options.adapter;
  // A completion has no earlier KV to hand over: it is encoded where it is decoded.
  const Placement placement = impl_->placer->Place(Stage::kGenerate, state);
  DeviceWorker& worker = impl_->devices->Worker(placement.device);
  Backend& backend = worker.backend();
  HETERO_ASSIGN_OR_RETURN(SequenceId seq, NewSessionSequence(backend, kv));

  auto job = std::make_shared<GenerationJob>();
  job->seq = seq;
  job->prefill_tokens = prompt;
  job->history = prompt;
  job->sampler.emplace(std::move(sampler));
  job->max_tokens = options.max_tokens;
  job->ignore_end_of_generation = options.ignore_end_of_generation;
  job->stop_strings = options.stop;
  job->logprobs = options.logprobs;
  job->on_text = options.on_text;
  if (options.timeout.count() > 0) job->deadline = start + options.timeout;
  absl::Status submitted = worker.Submit(job);
  if (submitted.ok()) worker.Wait(job);
  backend.FreeSequence(seq);
  impl_->devices->PokeAll();  // its KV is free: a job waiting for memory may go
  HETERO_RETURN_IF_ERROR(submitted);
  // A fresh Status, not a copy (see GenerateStage: the job's may be dropped on the worker).
  if (!job->status.ok()) return absl::Status(job->status.code(), job->status.message());

  CompletionResult result;
  result.text = std::move(job->text);
  result.tokens = std::move(job->generated);
  result.logprobs = std::move(job->token_logprobs);
  TaskReport& report = result.report;
  report.prompt_tokens = state.prompt_tokens;
  report.generated_tokens = static_cast<int>(result.tokens.size());
  report.stop_reason = job->stop_reason;
  if (job->first_token != Clock::time_point{}) report.time_to_first_token_ms = Ms(start, job->first_token);
  StageReport understand;
  understand.stage = Stage::kUnderstand;
  understand.device = placement.device;
  understand.reason = placement.reason;
  understand.start_ms = job->prefill_start != Clock::time_point{} ? Ms(start, job->prefill_start) : 0;
  understand.end_ms = job->prefill_end != Clock::time_point{} ? Ms(start, job->prefill_end) : understand.start_ms;
  understand.tokens_in = state.prompt_tokens;
  StageReport generate;
  generate.stage = Stage::kGenerate;
  generate.device = placement.device;
  generate.reason = placement.reason;
  generate.start_ms = understand.end_ms;
  generate.end_ms = Ms(start, job->finished);
  generate.tokens_in = std::max(0, job->kv_tokens_appended - state.prompt_tokens);
  generate.tokens_out = report.generated_tokens;
  ReportExpertTraffic(*job, &understand, &generate);
  report.stages = {understand, generate};
  report.total_ms = Ms(start, Clock::now());
  return result;
}

}  // namespace hetero
