#include "hetero/engine.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hetero/devices.h"
#include "hetero/model.h"
#include "src/runtime/device_registry.h"
#include "src/runtime/log_internal.h"
#include "src/runtime/placer.h"
#include "src/runtime/session_kv.h"
#include "src/runtime/stages/stages.h"
#include "src/runtime/energy/energy_meter.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/test_hooks.h"
#include "src/runtime/tools/json_schema.h"
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

absl::StatusOr<CpuPrecision> ParseCpuPrecision(std::string_view name) {
  if (name == "auto") return CpuPrecision::kAuto;
  if (name == "f32") return CpuPrecision::kF32;
  if (name == "bf16") return CpuPrecision::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown cpu_precision '", std::string(name), "' (accepted: auto, f32, bf16)"));
}

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
  std::unique_ptr<DeviceRegistry> devices;
  std::unique_ptr<Placer> placer;
  std::unique_ptr<StageServices> services;
  std::unique_ptr<internal::EnergyMeter> energy;  // null when measure_energy is off
  std::atomic<uint64_t> next_task{1};

  mutable Mutex mu;
  std::vector<std::weak_ptr<Session::State>> sessions ABSL_GUARDED_BY(mu);

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

Engine::Engine(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const std::string& model_path, const EngineOptions& options) {
  if (options.max_queued_tasks < 1 || options.max_batch < 1 || options.max_sessions < 1 || options.threads < 0 ||
      options.kv_capacity_tokens < 0) {
    return absl::InvalidArgumentError("engine options: max_queued_tasks, max_batch and max_sessions must be positive, "
                                      "threads and kv_capacity_tokens non-negative");
  }
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  HETERO_ASSIGN_OR_RETURN(std::string path, ResolveModelPath(model_path));
  HETERO_ASSIGN_OR_RETURN(impl->model, Model::Load(path));
  HETERO_ASSIGN_OR_RETURN(impl->tokenizer_owned, Tokenizer::Create(*impl->model));
  if (options.chat_format.empty()) {
    HETERO_ASSIGN_OR_RETURN(ChatTemplate chat, ChatTemplate::FromModel(*impl->model));
    impl->chat.emplace(std::move(chat));
  } else {
    HETERO_ASSIGN_OR_RETURN(ChatFormat format, ParseChatFormat(options.chat_format));
    impl->chat.emplace(ChatTemplate::ForFormat(format));
  }
  if (options.custom_scheduler != nullptr) {
    impl->scheduler = options.custom_scheduler;
  } else {
    HETERO_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> s, MakeScheduler(options.scheduler));
    impl->scheduler = std::move(s);
  }
  std::string profile = options.calibration_profile;
  if (profile.empty()) {
    if (const char* env = std::getenv("HETERO_PROFILE"); env != nullptr) profile = env;
  }
  if (!profile.empty()) {
    HETERO_ASSIGN_OR_RETURN(impl->calibration, LoadCalibration(profile));
    impl->calibrated = true;
  } else {
    internal::Log(LogLevel::kInfo, "no calibration profile (run `hetero-bench --calibrate`); the scheduler uses "
                                   "default device costs");
  }

  BackendRequest request;
  request.cpu_threads = options.threads;
  HETERO_ASSIGN_OR_RETURN(request.cpu_precision, ParseCpuPrecision(options.cpu_precision));
  request.max_sequences = options.max_sessions;
  request.share_kv_prefixes = options.share_kv_prefixes;
  request.kv_capacity_tokens =
      options.kv_capacity_tokens > 0 ? options.kv_capacity_tokens : 4 * impl->model->config().context_length;
  HETERO_ASSIGN_OR_RETURN(std::vector<DeviceSlot> slots, CreateDeviceBackends(*impl->model, request));
  Impl* raw = impl.get();
  impl->devices = std::make_unique<DeviceRegistry>(std::move(slots), *impl->tokenizer_owned, options.max_queued_tasks,
                                                   options.max_batch,
                                                   [raw](Device device, int tokens) { return raw->EvictIdle(device, tokens); });
  for (EngineDevice& d : impl->devices->devices()) {
    for (const auto& [device, costs] : impl->calibration.devices) {
      if (device == d.id) d.costs = costs;
    }
    if (d.available() && d.id.is_gpu()) {
      internal::Log(LogLevel::kInfo, absl::StrCat(DeviceName(d.id), " backend ready: ", d.backend->info().name));
    } else if (!d.available()) {
      internal::Log(LogLevel::kInfo, absl::StrCat(DeviceName(d.id), " unavailable: ", d.unavailable_reason));
    }
  }
  impl->placer = std::make_unique<Placer>(*impl->devices, impl->scheduler, impl->calibration.host_device_gb_per_s,
                                          impl->calibrated);
  impl->services = std::make_unique<StageServices>(*impl->devices, *impl->placer, *impl->chat, *impl->tokenizer_owned);
  if (options.measure_energy) {
    DeviceWorker* cpu_worker = impl->devices->cpu().worker.get();
    std::vector<std::pair<Device, std::function<double()>>> gpus;
    for (EngineDevice& d : impl->devices->devices()) {
      if (!d.available() || !d.id.is_gpu()) continue;
      DeviceWorker* worker = d.worker.get();
      gpus.emplace_back(d.id, [worker] { return worker->busy_seconds(); });
    }
    impl->energy = internal::MakeEngineEnergyMeter(
        options.power_model, [cpu_worker] { return cpu_worker->busy_seconds(); }, std::move(gpus));
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Session>> Engine::NewSession(const std::string& system_prompt) {
  auto state = std::make_shared<Session::State>();
  state->engine = impl_;
  {
    MutexLock lock(&impl_->mu);
    std::erase_if(impl_->sessions, [](const auto& w) { return w.expired(); });
    if (static_cast<int>(impl_->sessions.size()) >= impl_->options.max_sessions) {
      return absl::ResourceExhaustedError(absl::StrCat("engine: ", impl_->sessions.size(), " sessions live, the maximum is ",
                                                       impl_->options.max_sessions));
    }
    impl_->sessions.push_back(state);
  }
  {
    MutexLock lock(&state->mu);
    if (!system_prompt.empty()) state->messages.push_back(ChatMessage{"system", system_prompt, {}, "", ""});
    state->last_used = Clock::now();
  }
  return std::unique_ptr<Session>(new Session(std::move(state)));
}

absl::StatusOr<std::vector<std::vector<float>>> Engine::Embed(const std::vector<std::string>& texts,
                                                              const EmbedOptions& options) {
  HETERO_ASSIGN_OR_RETURN(EmbedResult result, EmbedWithReport(texts, options));
  return std::move(result.embeddings);
}

absl::StatusOr<std::vector<std::vector<float>>> Engine::EmbedTokens(const std::vector<std::vector<int32_t>>& tokens,
                                                                    const EmbedOptions& options) {
  HETERO_ASSIGN_OR_RETURN(EmbedResult result, EmbedTokensWithReport(tokens, options));
  return std::move(result.embeddings);
}

absl::StatusOr<EmbedResult> Engine::EmbedWithReport(const std::vector<std::string>& texts, const EmbedOptions& options) {
  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(texts.size());
  const Tokenizer& tokenizer = *impl_->tokenizer_owned;
  const bool bos = tokenizer.add_bos_by_default() && tokenizer.bos() >= 0;
  for (const std::string& text : texts) {
    HETERO_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(text, bos, /*parse_special=*/false));
    tokens.push_back(std::move(ids));
  }
  return EmbedTokensWithReport(tokens, options);
}

absl::StatusOr<EmbedResult> Engine::EmbedTokensWithReport(const std::vector<std::vector<int32_t>>& tokens,
                                                          const EmbedOptions& options) {
  if (options.layers < 0) return absl::InvalidArgumentError("EmbedOptions::layers must not be negative");
  const Clock::time_point start = Clock::now();
  TaskState state;
  state.task_id = impl_->next_task++;
  for (const std::vector<int32_t>& t : tokens) {
    state.prompt_tokens += static_cast<int>(t.size());
  }
  state.uncached_prompt_tokens = state.prompt_tokens;
  const Placement placement = impl_->placer->Place(Stage::kEmbed, state);
  absl::StatusOr<std::vector<std::vector<float>>> embeddings = absl::InternalError("embeddings did not run");
  // On the device's worker, between its decode steps: one user of the backend at a time.
  HETERO_RETURN_IF_ERROR(impl_->devices->Worker(placement.device).RunExclusive([&](Backend& backend) {
    embeddings = backend.Embed(tokens, options.pooling, options.layers);
  }));
  if (!embeddings.ok()) return embeddings.status();
  EmbedResult result;
  result.embeddings = std::move(*embeddings);
  result.report.stage = Stage::kEmbed;
  result.report.device = placement.device;
  result.report.reason = placement.reason;
  result.report.start_ms = 0;
  result.report.end_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  result.report.tokens_in = state.prompt_tokens;
  return result;
}

int Engine::embedding_dimension() const { return impl_->model->config().n_embd; }

const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer_owned; }

EngineStats Engine::stats() const {
  EngineStats s;
  {
    MutexLock lock(&impl_->mu);
    for (const auto& w : impl_->sessions) s.sessions += w.expired() ? 0 : 1;
  }
  for (const EngineDevice& d : impl_->devices->devices()) {
    if (!d.available()) continue;
    s.queued_tasks += d.worker->queued();
    s.active_tasks += d.worker->active();
    const KvCacheStats kv = d.backend->kv_cache_stats();
    s.kv_used_tokens += kv.used_tokens;
    s.kv_capacity_tokens += kv.capacity_tokens;
    s.kv_shared_tokens += kv.shared_tokens;
    s.kv_cached_tokens += kv.cached_tokens;
    s.kv_prefix_hit_tokens += kv.attached_tokens_total;
  }
  return s;
}

std::string Engine::scheduler_name() const { return impl_->scheduler->name(); }

SystemSnapshot Engine::snapshot() const { return impl_->placer->Snapshot(); }

std::string Engine::DescribeDevices() const {
  const SystemSnapshot snap = impl_->placer->Snapshot();
  std::string out;
  for (const DeviceSnapshot& d : snap.devices) {
    absl::StrAppendFormat(&out, "%s: %s; costs%s: prefill %.0f tok/s, decode %.0f tok/s (batched %.0f), %.0f W active, %.0f W idle\n",
                          DeviceName(d.device), d.available ? d.name : "unavailable (" + d.unavailable_reason + ")",
                          snap.calibrated ? "" : " (defaults)", d.costs.prefill_tokens_per_s, d.costs.decode_tokens_per_s,
                          d.costs.batched_decode_tokens_per_s, d.costs.active_watts, d.costs.idle_watts);
  }
  return out;
}

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
  State& s = *state_;
  for (size_t i = 0; i < options.stop.size(); ++i) {
    // An empty stop string would match at once and end every reply before it starts.
    if (options.stop[i].empty()) return absl::InvalidArgumentError(absl::StrCat("RunOptions::stop[", i, "] is empty"));
  }
  if (options.logprobs < -1 || options.logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunOptions::logprobs is ", options.logprobs, ", expected -1 (off) or 0 to ", kMaxTopLogprobs));
  }
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
  messages.push_back(ChatMessage{"user", user_message, {}, "", ""});
  TaskContext task;
  task.services = s.engine->services.get();
  task.task_id = s.engine->next_task++;
  task.start = Clock::now();
  task.options = &options;
  if (options.timeout.count() > 0) task.deadline = task.start + options.timeout;
  task.cancelled = &s.cancelled;
  task.messages = &messages;
  task.generated = &generated;
  task.kv = &s.kv;

  const ToolRegistry* registry = options.tool_registry.get();
  task.response_grammar = std::move(response_grammar);
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
      task.tool_grammar = task.tool_format == ToolCallFormat::kGeneric
                              ? internal::Grammar::GenericReply(names, schemas)
                              : internal::Grammar::ToolCall(names, schemas,
                                                            task.tool_format == ToolCallFormat::kLlama3 ? "parameters"
                                                                                                         : "arguments");
    }
  }

  absl::Status status = RunUnderstandGate(task, user_message, registry);
  std::string answer;
  std::vector<std::string> earlier_calls;  // name + arguments of every call so far
  if (status.ok() && task.refusal.has_value()) {
    answer = *task.refusal;  // refused before any Generate work
    messages.push_back(ChatMessage{"assistant", answer});
  }
  for (int round = 0; status.ok() && !task.refusal.has_value(); ++round) {
    task.tool_round = round;
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
    if (!tool) {
      // With tools, the conversation keeps the answer, not the reply format around it; the
      // reply as generated is kept aside for later runs in the same format.
      if (registry != nullptr) generated[messages.size()] = {task.tool_format, task.reply};
      messages.push_back(ChatMessage{"assistant", answer});  // without tools, the reply itself
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
  return RunResult{answer, std::move(task.report), std::move(task.token_logprobs)};
}

}  // namespace hetero
