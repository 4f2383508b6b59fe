#include "hetero/engine.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hetero/devices.h"
#include "hetero/model.h"
#include "src/runtime/engine_impl.h"
#include "src/runtime/expert_usage.h"
#include "src/runtime/log_internal.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/status_macros.h"

namespace hetero {

absl::StatusOr<CpuPrecision> ParseCpuPrecision(std::string_view name) {
  if (name == "auto") return CpuPrecision::kAuto;
  if (name == "f32") return CpuPrecision::kF32;
  if (name == "bf16") return CpuPrecision::kBf16;
  if (name == "int8") return CpuPrecision::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown cpu_precision '", std::string(name), "' (accepted: auto, int8, f32, bf16)"));
}
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
    absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromModel(*impl->model);
    if (chat.ok()) {
      impl->chat.emplace(std::move(*chat));
    } else {
      // A base model (no template) still completes raw text (Engine::Complete); only
      // conversations need a template, and they get this reason.
      internal::Log(LogLevel::kInfo, absl::StrCat("conversations are unavailable until a chat format is chosen: ",
                                                  chat.status().message()));
      impl->chat.emplace(ChatTemplate::Custom(
          [reason = std::string(chat.status().message())](const std::vector<ChatMessage>&,
                                                          const std::vector<ToolDefinition>&,
                                                          bool) -> absl::StatusOr<std::string> {
            return absl::FailedPreconditionError(
                absl::StrCat(reason, "; set EngineOptions::chat_format to render conversations in a known family"));
          }));
    }
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
  request.gpu_memory_budget_bytes = options.gpu_memory_budget_bytes;
  request.place_experts = [scheduler = impl->scheduler](const ExpertPlacementFacts& facts) {
    return scheduler->PlaceExperts(facts);
  };
  if (!options.expert_usage_path.empty()) {
    HETERO_ASSIGN_OR_RETURN(impl->loaded_expert_usage, ReadExpertUsageFile(options.expert_usage_path));
    HETERO_RETURN_IF_ERROR(CheckExpertUsageFitsModel(impl->loaded_expert_usage, impl->model->impl().definition,
                                                     absl::StrCat("expert usage file '", options.expert_usage_path,
                                                                  "'")));
    request.expert_usage = impl->loaded_expert_usage;
  }
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

absl::StatusOr<std::unique_ptr<Session>> Engine::NewSessionWithHistory(const std::vector<ChatMessage>& history) {
  for (size_t i = 0; i < history.size(); ++i) {
    if (history[i].role.empty()) return absl::InvalidArgumentError(absl::StrCat("history[", i, "] has no role"));
  }
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, NewSession());
  MutexLock lock(&session->state_->mu);
  session->state_->messages = history;
  return session;
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

const ChatTemplate& Engine::chat_template() const { return *impl_->chat; }

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

ExpertUsage Engine::expert_usage() const {
  ExpertUsage usage = impl_->loaded_expert_usage;
  for (const EngineDevice& d : impl_->devices->devices()) {
    if (!d.available()) continue;
    // Every device counts the model's own layers and experts, which the file was checked
    // against: the shapes always match.
    absl::StatusOr<ExpertUsage> sum = AddExpertUsage(usage, d.backend->expert_usage());
    if (!sum.ok()) {  // only an overflow past 2^64 evaluations
      internal::Log(LogLevel::kWarning, absl::StrCat("expert usage of ", DeviceName(d.id), " left out: ",
                                                     sum.status().message()));
      continue;
    }
    usage = *std::move(sum);
  }
  return usage;
}

absl::Status Engine::SaveExpertUsage(const std::string& path) const { return WriteExpertUsageFile(expert_usage(), path); }

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

}  // namespace hetero
