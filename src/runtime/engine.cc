#include "hetero/engine.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hetero/devices.h"
#include "hetero/model.h"
#include "src/cpu/cpu_backend.h"
#include "src/gpu/cuda_backend.h"
#include "src/runtime/log_internal.h"
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

struct Engine::Impl : public StageServices {
  EngineOptions options;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer_owned;
  std::optional<ChatTemplate> chat;
  std::shared_ptr<Scheduler> scheduler;
  Calibration calibration;
  bool calibrated = false;
  std::unique_ptr<CpuBackend> cpu;
  std::unique_ptr<DeviceWorker> cpu_worker;
  std::unique_ptr<Backend> gpu;               // null without a usable GPU
  std::unique_ptr<DeviceWorker> gpu_worker;
  std::unique_ptr<internal::EnergyMeter> energy;  // null when measure_energy is off
  std::string gpu_unavailable_reason;
  std::atomic<uint64_t> next_task{1};

  mutable Mutex mu;
  std::vector<std::weak_ptr<Session::State>> sessions ABSL_GUARDED_BY(mu);
  bool gpu_fallback_noticed ABSL_GUARDED_BY(mu) = false;

  ~Impl() override {
    energy.reset();      // its thread reads the worker's busy time
    gpu_worker.reset();  // each joins its thread before its backend goes
    cpu_worker.reset();
  }

  DeviceCosts Costs(Device d) const {
    for (const auto& [device, costs] : calibration.devices) {
      if (device == d) return costs;
    }
    return DefaultCosts(d);
  }

  SystemSnapshot Snapshot() const {
    SystemSnapshot s;
    DeviceSnapshot c;
    c.device = Device::kCpu;
    c.available = true;
    c.queued_tasks = cpu_worker->queued();
    c.active_tasks = cpu_worker->active();
    c.kv_capacity_tokens = cpu->kv_capacity_tokens();
    c.kv_free_tokens = c.kv_capacity_tokens - cpu->kv_used_tokens();
    c.kv_bytes_per_token = static_cast<int64_t>(cpu->kv_bytes_per_token());
    c.costs = Costs(Device::kCpu);
    s.devices.push_back(c);
    DeviceSnapshot g;
    g.device = Device::kGpu;
    g.available = gpu != nullptr;
    g.unavailable_reason = gpu_unavailable_reason;
    if (gpu != nullptr) {
      g.queued_tasks = gpu_worker->queued();
      g.active_tasks = gpu_worker->active();
      g.kv_capacity_tokens = gpu->kv_capacity_tokens();
      g.kv_free_tokens = g.kv_capacity_tokens - gpu->kv_used_tokens();
      g.kv_bytes_per_token = static_cast<int64_t>(gpu->kv_bytes_per_token());
    }
    g.costs = Costs(Device::kGpu);
    s.devices.push_back(g);
    s.host_device_gb_per_s = calibration.host_device_gb_per_s;
    s.calibrated = calibrated;
    return s;
  }

  Placement Place(Stage stage, const TaskState& task) override {
    Placement p = scheduler->Place(stage, task, Snapshot());
    if (p.device == Device::kGpu && gpu == nullptr) {
      bool notice = false;
      {
        MutexLock lock(&mu);
        notice = !gpu_fallback_noticed;
        gpu_fallback_noticed = true;
      }
      if (notice) {
        internal::Log(LogLevel::kWarning, absl::StrCat("scheduler '", scheduler->name(), "' placed ", std::string(StageName(stage)),
                                                       " on the GPU, which is unavailable (", gpu_unavailable_reason,
                                                       "); running on the CPU"));
      }
      p.device = Device::kCpu;
      p.reason = absl::StrCat(p.reason, "; gpu unavailable, cpu used");
      if (p.kv_policy == KvPolicy::kSwapToHost && stage == Stage::kToolCall && task.kv_device == Device::kCpu) {
        p.kv_policy = KvPolicy::kKeep;
      }
    }
    return p;
  }

  DeviceWorker& Worker(Device device) override {
    return device == Device::kGpu && gpu_worker != nullptr ? *gpu_worker : *cpu_worker;
  }
  const ChatTemplate& chat_template() const override { return *chat; }
  const Tokenizer& tokenizer() const override { return *tokenizer_owned; }
  std::shared_ptr<const internal::VocabBytes> vocab_bytes() override {
    MutexLock lock(&mu);
    if (vocab_bytes_ == nullptr) vocab_bytes_ = std::make_shared<const internal::VocabBytes>(*tokenizer_owned);
    return vocab_bytes_;
  }
  std::shared_ptr<const internal::VocabBytes> vocab_bytes_ ABSL_GUARDED_BY(mu);

  // Frees the KV of idle sessions, least recently used first, until `needed` tokens are
  // free or none is left. Runs on a worker thread.
  // Frees the KV of idle sessions held on `device`, least recently used first.
  int EvictIdle(int needed, Device device) {
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
      ReleaseSessionKv(*this, s->kv);
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

  CpuBackendOptions cpu;
  cpu.threads = options.threads > 0 ? options.threads : DefaultCpuThreads();
  if (options.cpu_precision == "f32") {
    cpu.precision = CpuPrecision::kF32;
  } else if (options.cpu_precision == "bf16") {
    cpu.precision = CpuPrecision::kBf16;
  } else if (options.cpu_precision != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("unknown cpu_precision '", options.cpu_precision, "'"));
  }
  cpu.max_sequences = options.max_sessions;
  cpu.share_kv_prefixes = options.share_kv_prefixes;
  cpu.kv_capacity_tokens =
      options.kv_capacity_tokens > 0 ? options.kv_capacity_tokens : 4 * impl->model->config().context_length;
  HETERO_ASSIGN_OR_RETURN(impl->cpu, CpuBackend::Create(*impl->model, cpu));
  Impl* raw = impl.get();
  impl->cpu_worker = std::make_unique<DeviceWorker>(*impl->cpu, *impl->tokenizer_owned, options.max_queued_tasks,
                                                    options.max_batch, [raw](int tokens) { return raw->EvictIdle(tokens, Device::kCpu); });
  const CudaInfo& cuda = QueryDevices().cuda;
  const std::shared_ptr<const internal::TestHooks> hooks = internal::CurrentTestHooks();
  if (hooks != nullptr && hooks->gpu_backend) {
    // Fault injection: a stand-in for the GPU (tests).
    HETERO_ASSIGN_OR_RETURN(impl->gpu, hooks->gpu_backend(*impl->model, cpu.kv_block_tokens, cpu.kv_capacity_tokens,
                                                          options.max_sessions));
    impl->gpu_worker = std::make_unique<DeviceWorker>(*impl->gpu, *impl->tokenizer_owned, options.max_queued_tasks,
                                                      options.max_batch,
                                                      [raw](int tokens) { return raw->EvictIdle(tokens, Device::kGpu); });
  } else if (cuda.available) {
    CudaBackendOptions gpu;
    gpu.max_sequences = options.max_sessions;
    gpu.kv_capacity_tokens = cpu.kv_capacity_tokens;
    gpu.kv_block_tokens = cpu.kv_block_tokens;
    gpu.share_kv_prefixes = options.share_kv_prefixes;  // one block layout: KV moves between them as is
    absl::StatusOr<std::unique_ptr<CudaBackend>> created = CudaBackend::Create(*impl->model, gpu);
    if (created.ok()) {
      impl->gpu = std::move(*created);
      impl->gpu_worker = std::make_unique<DeviceWorker>(*impl->gpu, *impl->tokenizer_owned, options.max_queued_tasks,
                                                        options.max_batch,
                                                        [raw](int tokens) { return raw->EvictIdle(tokens, Device::kGpu); });
      internal::Log(LogLevel::kInfo, absl::StrCat("GPU backend ready: ", impl->gpu->info().name));
    } else {
      // Too little device memory, or a device error: the CPU does everything.
      impl->gpu_unavailable_reason = absl::StrCat("the CUDA backend could not start: ", created.status().message());
      internal::Log(LogLevel::kWarning, absl::StrCat(impl->gpu_unavailable_reason, "; running on the CPU only"));
    }
  } else {
    impl->gpu_unavailable_reason = cuda.notice;
  }
  if (options.measure_energy) {
    DeviceWorker* cpu_worker = impl->cpu_worker.get();
    DeviceWorker* gpu_worker = impl->gpu_worker.get();
    std::function<double()> gpu_busy;
    if (gpu_worker != nullptr) gpu_busy = [gpu_worker] { return gpu_worker->busy_seconds(); };
    impl->energy = internal::MakeEngineEnergyMeter(
        options.power_model, [cpu_worker] { return cpu_worker->busy_seconds(); }, std::move(gpu_busy));
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
  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(texts.size());
  const Tokenizer& tokenizer = *impl_->tokenizer_owned;
  const bool bos = tokenizer.add_bos_by_default() && tokenizer.bos() >= 0;
  for (const std::string& text : texts) {
    HETERO_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(text, bos, /*parse_special=*/false));
    tokens.push_back(std::move(ids));
  }
  return EmbedTokens(tokens, options);
}

absl::StatusOr<std::vector<std::vector<float>>> Engine::EmbedTokens(const std::vector<std::vector<int32_t>>& tokens,
                                                                    const EmbedOptions& options) {
  if (options.layers < 0) return absl::InvalidArgumentError("EmbedOptions::layers must not be negative");
  return impl_->cpu->Embed(tokens, options.pooling, options.layers);
}

int Engine::embedding_dimension() const { return impl_->model->config().n_embd; }

const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer_owned; }

EngineStats Engine::stats() const {
  EngineStats s;
  {
    MutexLock lock(&impl_->mu);
    for (const auto& w : impl_->sessions) s.sessions += w.expired() ? 0 : 1;
  }
  s.queued_tasks = impl_->cpu_worker->queued();
  s.active_tasks = impl_->cpu_worker->active();
  if (impl_->gpu != nullptr) {
    s.queued_tasks += impl_->gpu_worker->queued();
    s.active_tasks += impl_->gpu_worker->active();
  }
  const Backend* backends[] = {impl_->cpu.get(), impl_->gpu.get()};
  for (const Backend* backend : backends) {
    if (backend == nullptr) continue;
    const KvCacheStats kv = backend->kv_cache_stats();
    s.kv_used_tokens += kv.used_tokens;
    s.kv_capacity_tokens += kv.capacity_tokens;
    s.kv_shared_tokens += kv.shared_tokens;
    s.kv_cached_tokens += kv.cached_tokens;
    s.kv_prefix_hit_tokens += kv.attached_tokens_total;
  }
  return s;
}

std::string Engine::scheduler_name() const { return impl_->scheduler->name(); }

std::string Engine::DescribeDevices() const {
  const SystemSnapshot snap = impl_->Snapshot();
  std::string out;
  for (const DeviceSnapshot& d : snap.devices) {
    absl::StrAppendFormat(&out, "%s: %s; costs%s: prefill %.0f tok/s, decode %.0f tok/s (batched %.0f), %.0f W active, %.0f W idle\n",
                          DeviceName(d.device),
                          d.available ? impl_->cpu->info().name : "unavailable (" + d.unavailable_reason + ")",
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
    if (!s.running) ReleaseSessionKv(*s.engine, s.kv);
  }
  s.engine->cpu_worker->Poke();
}

void Session::Cancel() {
  state_->cancelled = true;
  state_->engine->cpu_worker->Poke();
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
  task.services = s.engine.get();
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
    task.tool_format = internal::ResolveToolFormat(s.engine->chat_template(), options.tool_format);
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
        !task.force_cpu && task.report.generated_tokens == generated_before) {
      // The device ran out of memory for this task (its KV, or a buffer) before any text of
      // this round was shown: encode and decode on the CPU instead, saying why.
      task.force_cpu = absl::StrCat("; ", std::string(DeviceName(task.kv->device)), " out of memory (",
                                    status.message(), "), re-placed on the cpu");
      ReleaseSessionKv(*s.engine, s.kv);
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
      ReleaseSessionKv(*s.engine, s.kv);
    } else {
      s.messages = std::move(messages);
      s.generated = std::move(generated);
    }
  }
  // The session's KV is now free or evictable: a job waiting for memory may go.
  s.engine->cpu_worker->Poke();
  if (!status.ok()) return status;
  return RunResult{answer, std::move(task.report), std::move(task.token_logprobs)};
}

}  // namespace hetero
