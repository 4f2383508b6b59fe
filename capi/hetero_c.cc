// C ABI entry points over the C++ API. Every entry point catches everything: a C++
// exception must never cross into C. Failures set a thread-local message.
#include "hetero.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "hetero/engine.h"
#include "hetero/log.h"
#include "hetero/scheduler.h"
#include "hetero/tools.h"
#include "hetero/version.h"
#include "nlohmann/json.hpp"

struct hetero_engine {
  std::unique_ptr<hetero::Engine> engine;
};

struct hetero_session {
  std::unique_ptr<hetero::Session> session;
};

struct hetero_tools {
  std::shared_ptr<hetero::ToolRegistry> registry = std::make_shared<hetero::ToolRegistry>();
};

struct hetero_tool_reply {
  std::optional<std::string> result;
  std::optional<std::string> error;
};

struct hetero_result {
  std::string text;
  std::string reasoning;
  std::string report_json;
  int32_t generated_tokens = 0;
  int32_t tool_calls = 0;
  std::vector<hetero::TokenLogprob> logprobs;
};

namespace {

// The integer a C caller stored in an enum. C lets any int through an enum; C++ makes loading
// a value outside the enumerators' range undefined, so read the bits as an int instead.
template <typename CEnum>
int RawEnum(const CEnum& value) {
  static_assert(sizeof(CEnum) == sizeof(int));
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}


thread_local std::string last_error;

hetero_status Fail(hetero_status status, std::string message) {
  last_error = std::move(message);
  return status;
}

hetero_status FromStatus(const absl::Status& s) {
  if (s.ok()) return HETERO_OK;
  hetero_status code = HETERO_INTERNAL;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      code = HETERO_INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kNotFound:
      code = HETERO_NOT_FOUND;
      break;
    case absl::StatusCode::kUnimplemented:
      code = HETERO_UNSUPPORTED;
      break;
    case absl::StatusCode::kResourceExhausted:
      code = HETERO_OUT_OF_MEMORY;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      code = HETERO_TIMEOUT;
      break;
    case absl::StatusCode::kCancelled:
      code = HETERO_CANCELLED;
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kFailedPrecondition:
      code = HETERO_BUSY;
      break;
    case absl::StatusCode::kAborted:
      code = HETERO_DEVICE_ERROR;
      break;
    default:
      break;
  }
  return Fail(code, std::string(s.message()));
}

// Runs `body`, turning any exception into a status.
template <typename Body>
hetero_status Guard(const char* function, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(HETERO_OUT_OF_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return Fail(HETERO_INTERNAL, std::string(function) + ": " + e.what());
  } catch (...) {
    return Fail(HETERO_INTERNAL, std::string(function) + ": unknown exception");
  }
}

hetero_status NullArgument(const char* function, const char* name) {
  return Fail(HETERO_INVALID_ARGUMENT, std::string(function) + ": " + name + " is NULL");
}

// A caller's struct may be older (smaller) than ours: fields past its struct_size keep
// their defaults. A size below the first field, or larger than ours, is refused (a newer
// caller's fields would be ignored silently).
template <typename T>
hetero_status ReadOptions(const char* function, const T* in, T& out, void (*defaults)(T*)) {
  defaults(&out);
  if (in == nullptr) return HETERO_OK;
  if (in->struct_size < sizeof(size_t) || in->struct_size > sizeof(T)) {
    return Fail(HETERO_INVALID_ARGUMENT, std::string(function) + ": struct_size " + std::to_string(in->struct_size) +
                                             " is not between " + std::to_string(sizeof(size_t)) + " and " +
                                             std::to_string(sizeof(T)) + " (call the *_default function first)");
  }
  std::memcpy(static_cast<void*>(&out), in, in->struct_size);
  out.struct_size = sizeof(T);
  return HETERO_OK;
}


hetero_device ToC(hetero::Device d) {
  return d.is_gpu() ? HETERO_DEVICE_GPU_N(d.ordinal) : HETERO_DEVICE_CPU;
}

// A device number from C: the CPU, or GPU n - 1. A negative number is no device; the CPU
// runs the stage and the reason says so.
hetero::Device FromC(int32_t raw) { return raw >= 1 ? hetero::Device::Gpu(raw - 1) : hetero::Device::kCpu; }

hetero_device_state DeviceState(const hetero::DeviceSnapshot& d) {
  hetero_device_state c{};
  c.struct_size = sizeof c;
  c.device = ToC(d.device);
  c.available = d.available ? 1 : 0;
  c.queued_tasks = d.queued_tasks;
  c.active_tasks = d.active_tasks;
  c.kv_capacity_tokens = d.kv_capacity_tokens;
  c.kv_free_tokens = d.kv_free_tokens;
  c.kv_bytes_per_token = d.kv_bytes_per_token;
  c.prefill_tokens_per_s = d.costs.prefill_tokens_per_s;
  c.decode_tokens_per_s = d.costs.decode_tokens_per_s;
  c.active_watts = d.costs.active_watts;
  c.idle_watts = d.costs.idle_watts;
  return c;
}

// `text` into a C buffer of `capacity` bytes, NUL-terminated, cut to fit.
void CopyCut(const std::string& text, char* out, size_t capacity) {
  if (out == nullptr || capacity == 0) return;
  const size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

// A C scheduling callback as a hetero::Scheduler.
class CallbackScheduler : public hetero::Scheduler {
 public:
  CallbackScheduler(hetero_scheduler_callback callback, void* user_data, std::string name)
      : callback_(callback), user_data_(user_data), name_(std::move(name)) {}
  std::string name() const override { return name_; }

  hetero::Placement Place(hetero::Stage stage, const hetero::TaskState& task,
                          const hetero::SystemSnapshot& system) override {
    hetero_task_state t{};
    t.struct_size = sizeof t;
    t.task_id = task.task_id;
    t.prompt_tokens = task.prompt_tokens;
    t.uncached_prompt_tokens = task.uncached_prompt_tokens;
    t.max_new_tokens = task.max_new_tokens;
    t.generated_tokens = task.generated_tokens;
    t.kv_tokens = task.kv_tokens;
    t.kv_device = ToC(task.kv_device);
    t.expected_tool_seconds = task.expected_tool_seconds;
    t.latency_target_seconds = task.latency_target_seconds;
    t.small_answer = task.small_answer ? 1 : 0;
    t.out_of_memory = task.out_of_memory_device.has_value() ? 1 : 0;
    t.out_of_memory_device = ToC(task.out_of_memory_device.value_or(hetero::Device::kCpu));
    std::vector<hetero_device_state> devices;
    for (const hetero::DeviceSnapshot& d : system.devices) devices.push_back(DeviceState(d));
    hetero_placement p{};
    p.struct_size = sizeof p;
    p.device = HETERO_DEVICE_CPU;
    p.kv_policy = HETERO_KV_KEEP;
    const hetero_stage c_stage = stage == hetero::Stage::kUnderstand ? HETERO_STAGE_UNDERSTAND
                                 : stage == hetero::Stage::kGenerate ? HETERO_STAGE_GENERATE
                                 : stage == hetero::Stage::kEmbed    ? HETERO_STAGE_EMBED
                                                                     : HETERO_STAGE_TOOL_CALL;
    callback_(c_stage, &t, devices.data(), devices.size(), &p, user_data_);
    hetero::Placement out;
    const int32_t raw_device = RawEnum(p.device);
    out.device = FromC(raw_device);
    out.override_rules = p.override_rules != 0;
    out.kv_policy = RawEnum(p.kv_policy) == HETERO_KV_SWAP_TO_HOST ? hetero::KvPolicy::kSwapToHost
                    : RawEnum(p.kv_policy) == HETERO_KV_DISCARD    ? hetero::KvPolicy::kDiscard
                                                          : hetero::KvPolicy::kKeep;
    out.reason = std::string(p.reason, strnlen(p.reason, sizeof p.reason));  // NUL or not
    if (out.reason.empty()) out.reason = name_;
    if (raw_device < 0) out.reason += "; the policy returned device " + std::to_string(raw_device) + ", not a device";
    return out;
  }

 private:
  hetero_scheduler_callback callback_;
  void* user_data_;
  std::string name_;
};

}  // namespace

extern "C" {

uint32_t hetero_abi_version(void) { return HETERO_ABI_VERSION; }

const char* hetero_version_string(void) { return hetero::VersionString(); }

const char* hetero_status_name(hetero_status status) {
  switch (RawEnum(status)) {
    case HETERO_OK: return "HETERO_OK";
    case HETERO_INVALID_ARGUMENT: return "HETERO_INVALID_ARGUMENT";
    case HETERO_NOT_FOUND: return "HETERO_NOT_FOUND";
    case HETERO_UNSUPPORTED: return "HETERO_UNSUPPORTED";
    case HETERO_OUT_OF_MEMORY: return "HETERO_OUT_OF_MEMORY";
    case HETERO_DEVICE_ERROR: return "HETERO_DEVICE_ERROR";
    case HETERO_TIMEOUT: return "HETERO_TIMEOUT";
    case HETERO_CANCELLED: return "HETERO_CANCELLED";
    case HETERO_BUSY: return "HETERO_BUSY";
    case HETERO_INTERNAL: return "HETERO_INTERNAL";
  }
  return "HETERO_UNKNOWN_STATUS";
}

const char* hetero_last_error(void) { return last_error.c_str(); }

void hetero_set_log_callback(hetero_log_callback callback, void* user_data, hetero_log_level min_level) {
  try {
    const int level = std::clamp(RawEnum(min_level), 0, 3);
    if (callback == nullptr) {
      hetero::SetLogCallback(nullptr);
      return;
    }
    hetero::SetLogCallback(
        [callback, user_data](hetero::LogLevel l, std::string_view message) {
          callback(static_cast<hetero_log_level>(l), message.data(), message.size(), user_data);
        },
        static_cast<hetero::LogLevel>(level));
  } catch (...) {
  }
}

void hetero_log_to_stderr(hetero_log_level level, const char* message, size_t length, void* user_data) {
  (void)user_data;
  try {
    const int l = std::clamp(RawEnum(level), 0, 3);
    hetero::LogToStderr(static_cast<hetero::LogLevel>(l), std::string_view(message != nullptr ? message : "", length));
  } catch (...) {
  }
}

void hetero_engine_options_default(hetero_engine_options* options) {
  if (options == nullptr) return;
  *options = hetero_engine_options{};
  options->struct_size = sizeof(hetero_engine_options);
  options->scheduler = "seed";
}

hetero_status hetero_engine_create(const hetero_engine_options* options, hetero_engine** out_engine) {
  return Guard("hetero_engine_create", [&]() -> hetero_status {
    if (out_engine == nullptr) return NullArgument("hetero_engine_create", "out_engine");
    *out_engine = nullptr;
    hetero_engine_options o;
    if (hetero_status s = ReadOptions("hetero_engine_create", options, o, hetero_engine_options_default); s != HETERO_OK) {
      return s;
    }
    if (o.threads < 0) return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_create: threads must be >= 0");
    if (o.max_sessions < 0) return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_create: max_sessions must be >= 0");
    hetero::EngineOptions engine_options;
    engine_options.threads = o.threads;
    if (o.scheduler != nullptr) engine_options.scheduler = o.scheduler;
    if (o.max_sessions > 0) engine_options.max_sessions = o.max_sessions;
    engine_options.gpu_memory_budget_bytes = o.gpu_memory_budget_bytes;
    if (o.expert_usage_path != nullptr) engine_options.expert_usage_path = o.expert_usage_path;
    if (o.scheduler_callback != nullptr) {
      engine_options.custom_scheduler = std::make_shared<CallbackScheduler>(
          o.scheduler_callback, o.scheduler_user_data, o.scheduler_name != nullptr ? o.scheduler_name : "c-callback");
    }
    auto engine = hetero::Engine::Create(o.model_path != nullptr ? o.model_path : "", engine_options);
    if (!engine.ok()) return FromStatus(engine.status());
    *out_engine = new hetero_engine{std::move(*engine)};
    return HETERO_OK;
  });
}

void hetero_engine_destroy(hetero_engine* engine) {
  try {
    delete engine;
  } catch (...) {
  }
}

hetero_status hetero_tool_reply_set_result(hetero_tool_reply* reply, const char* text, size_t length) {
  return Guard("hetero_tool_reply_set_result", [&]() -> hetero_status {
    if (reply == nullptr) return NullArgument("hetero_tool_reply_set_result", "reply");
    if (text == nullptr && length > 0) return NullArgument("hetero_tool_reply_set_result", "text");
    reply->result = std::string(text == nullptr ? "" : text, length);
    reply->error.reset();
    return HETERO_OK;
  });
}

hetero_status hetero_tool_reply_set_error(hetero_tool_reply* reply, const char* message) {
  return Guard("hetero_tool_reply_set_error", [&]() -> hetero_status {
    if (reply == nullptr) return NullArgument("hetero_tool_reply_set_error", "reply");
    if (message == nullptr) return NullArgument("hetero_tool_reply_set_error", "message");
    reply->error = std::string(message);
    reply->result.reset();
    return HETERO_OK;
  });
}

void hetero_tool_default(hetero_tool* tool) {
  if (tool == nullptr) return;
  *tool = hetero_tool{};
  tool->struct_size = sizeof(hetero_tool);
}

hetero_status hetero_tools_create(hetero_tools** out_tools) {
  return Guard("hetero_tools_create", [&]() -> hetero_status {
    if (out_tools == nullptr) return NullArgument("hetero_tools_create", "out_tools");
    *out_tools = new hetero_tools;
    return HETERO_OK;
  });
}

void hetero_tools_destroy(hetero_tools* tools) {
  try {
    delete tools;
  } catch (...) {
  }
}

hetero_status hetero_tools_add(hetero_tools* tools, const hetero_tool* tool) {
  return Guard("hetero_tools_add", [&]() -> hetero_status {
    if (tools == nullptr) return NullArgument("hetero_tools_add", "tools");
    if (tool == nullptr) return NullArgument("hetero_tools_add", "tool");
    hetero_tool t;
    if (hetero_status s = ReadOptions("hetero_tools_add", tool, t, hetero_tool_default); s != HETERO_OK) return s;
    if (t.name == nullptr) return NullArgument("hetero_tools_add", "tool->name");
    if (t.parameters_json == nullptr) return NullArgument("hetero_tools_add", "tool->parameters_json");
    if (t.handler == nullptr) return NullArgument("hetero_tools_add", "tool->handler");
    hetero::Tool cpp;
    cpp.name = t.name;
    cpp.description = t.description != nullptr ? t.description : "";
    cpp.parameters_json = t.parameters_json;
    if (t.timeout_ms > 0) cpp.timeout = std::chrono::milliseconds(t.timeout_ms);
    cpp.handler = [handler = t.handler, user_data = t.user_data,
                   name = cpp.name](const std::string& arguments) -> absl::StatusOr<std::string> {
      hetero_tool_reply reply;
      handler(arguments.c_str(), &reply, user_data);
      if (reply.error.has_value()) return absl::UnknownError(*reply.error);
      if (!reply.result.has_value()) {
        return absl::InternalError("the tool's handler set neither a result nor an error");
      }
      return std::move(*reply.result);
    };
    return FromStatus(tools->registry->Register(std::move(cpp)));
  });
}

hetero_status hetero_tools_invoke(const hetero_tools* tools, const char* name, const char* arguments_json,
                                  hetero_result** out_result) {
  return Guard("hetero_tools_invoke", [&]() -> hetero_status {
    if (out_result == nullptr) return NullArgument("hetero_tools_invoke", "out_result");
    *out_result = nullptr;
    if (tools == nullptr) return NullArgument("hetero_tools_invoke", "tools");
    if (name == nullptr) return NullArgument("hetero_tools_invoke", "name");
    if (arguments_json == nullptr) return NullArgument("hetero_tools_invoke", "arguments_json");
    hetero::RunOptions defaults;
    hetero::ToolInvocation run = hetero::InvokeTool(*tools->registry, name, arguments_json, defaults.max_tool_result_bytes);
    auto out = std::make_unique<hetero_result>();
    out->text = std::move(run.content);
    hetero::TaskReport report;
    report.tool_calls.push_back(std::move(run.report));
    out->report_json = hetero::TaskReportJson(report);
    out->tool_calls = 1;
    *out_result = out.release();
    return HETERO_OK;
  });
}

size_t hetero_engine_device_count(const hetero_engine* engine) {
  if (engine == nullptr) return 0;
  try {
    return engine->engine->snapshot().devices.size();
  } catch (...) {
    return 0;
  }
}

hetero_status hetero_engine_device(const hetero_engine* engine, size_t index, hetero_device_state* state, char* name,
                                   size_t name_capacity, char* description, size_t description_capacity) {
  return Guard("hetero_engine_device", [&]() -> hetero_status {
    if (engine == nullptr) return NullArgument("hetero_engine_device", "engine");
    if (state == nullptr) return NullArgument("hetero_engine_device", "state");
    if (state->struct_size < sizeof(hetero_device_state)) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_device: state->struct_size is " +
                                               std::to_string(state->struct_size) + ", expected sizeof(hetero_device_state) = " +
                                               std::to_string(sizeof(hetero_device_state)));
    }
    if ((name == nullptr && name_capacity > 0) || (description == nullptr && description_capacity > 0)) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_device: a NULL buffer with a capacity above 0");
    }
    const hetero::SystemSnapshot snapshot = engine->engine->snapshot();
    if (index >= snapshot.devices.size()) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_device: index " + std::to_string(index) + " is past the last of " +
                                               std::to_string(snapshot.devices.size()) + " devices");
    }
    const hetero::DeviceSnapshot& d = snapshot.devices[index];
    *state = DeviceState(d);
    CopyCut(hetero::DeviceName(d.device), name, name_capacity);
    CopyCut(d.available ? d.name : "unavailable: " + d.unavailable_reason, description, description_capacity);
    return HETERO_OK;
  });
}

int32_t hetero_engine_embedding_dimension(const hetero_engine* engine) {
  return engine == nullptr ? 0 : engine->engine->embedding_dimension();
}

hetero_status hetero_engine_embed(hetero_engine* engine, const char* const* texts, int32_t count, int32_t last_token,
                                  int32_t layers, float* out, size_t out_floats) {
  return Guard("hetero_engine_embed", [&]() -> hetero_status {
    if (engine == nullptr) return NullArgument("hetero_engine_embed", "engine");
    if (texts == nullptr) return NullArgument("hetero_engine_embed", "texts");
    if (count < 1) return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_embed: count must be at least 1");
    if (layers < 0) return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_embed: layers must not be negative");
    const size_t dim = static_cast<size_t>(engine->engine->embedding_dimension());
    if (out == nullptr || out_floats / dim < static_cast<size_t>(count)) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_embed: out holds " + std::to_string(out == nullptr ? 0 : out_floats) +
                                               " floats, " + std::to_string(count) + " embeddings need " +
                                               std::to_string(static_cast<size_t>(count) * dim));
    }
    std::vector<std::string> inputs;
    inputs.reserve(static_cast<size_t>(count));
    for (int32_t i = 0; i < count; ++i) {
      if (texts[i] == nullptr) return NullArgument("hetero_engine_embed", ("texts[" + std::to_string(i) + "]").c_str());
      inputs.emplace_back(texts[i]);
    }
    hetero::EmbedOptions options;
    options.pooling = last_token != 0 ? hetero::EmbeddingPooling::kLastToken : hetero::EmbeddingPooling::kMean;
    options.layers = layers;
    absl::StatusOr<std::vector<std::vector<float>>> vectors = engine->engine->Embed(inputs, options);
    if (!vectors.ok()) return FromStatus(vectors.status());
    for (size_t i = 0; i < vectors->size(); ++i) std::copy((*vectors)[i].begin(), (*vectors)[i].end(), out + i * dim);
    return HETERO_OK;
  });
}

hetero_status hetero_engine_tokenize(const hetero_engine* engine, const char* text, int32_t add_bos, int32_t parse_special,
                                     int32_t* out_tokens, size_t capacity, size_t* out_count) {
  return Guard("hetero_engine_tokenize", [&]() -> hetero_status {
    if (out_count == nullptr) return NullArgument("hetero_engine_tokenize", "out_count");
    *out_count = 0;
    if (engine == nullptr) return NullArgument("hetero_engine_tokenize", "engine");
    if (text == nullptr) return NullArgument("hetero_engine_tokenize", "text");
    if (out_tokens == nullptr && capacity > 0) return NullArgument("hetero_engine_tokenize", "out_tokens (capacity > 0)");
    absl::StatusOr<std::vector<int32_t>> ids = engine->engine->tokenizer().Encode(text, add_bos != 0, parse_special != 0);
    if (!ids.ok()) return FromStatus(ids.status());
    *out_count = ids->size();
    if (out_tokens == nullptr && capacity == 0) return HETERO_OK;  // asking for the count
    if (capacity < ids->size()) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_tokenize: capacity " + std::to_string(capacity) + " is below the " +
                                               std::to_string(ids->size()) + " ids of the text");
    }
    std::copy(ids->begin(), ids->end(), out_tokens);
    return HETERO_OK;
  });
}

hetero_status hetero_engine_detokenize(const hetero_engine* engine, const int32_t* tokens, size_t count,
                                       int32_t skip_special, char* out_text, size_t capacity, size_t* out_length) {
  return Guard("hetero_engine_detokenize", [&]() -> hetero_status {
    if (out_length == nullptr) return NullArgument("hetero_engine_detokenize", "out_length");
    *out_length = 0;
    if (engine == nullptr) return NullArgument("hetero_engine_detokenize", "engine");
    if (tokens == nullptr && count > 0) return NullArgument("hetero_engine_detokenize", "tokens (count > 0)");
    if (out_text == nullptr && capacity > 0) return NullArgument("hetero_engine_detokenize", "out_text (capacity > 0)");
    const hetero::Tokenizer& tokenizer = engine->engine->tokenizer();
    for (size_t i = 0; i < count; ++i) {
      if (tokens[i] < 0 || tokens[i] >= tokenizer.vocab_size()) {
        return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_detokenize: tokens[" + std::to_string(i) + "] is " +
                                                 std::to_string(tokens[i]) + ", outside the vocabulary [0, " +
                                                 std::to_string(tokenizer.vocab_size()) + ")");
      }
    }
    absl::StatusOr<std::string> text =
        tokenizer.Decode(absl::Span<const int32_t>(tokens, count), /*skip_special=*/skip_special != 0);
    if (!text.ok()) return FromStatus(text.status());
    *out_length = text->size();
    if (out_text == nullptr && capacity == 0) return HETERO_OK;  // asking for the length
    if (capacity <= text->size()) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_detokenize: capacity " + std::to_string(capacity) +
                                               " is below the text's " + std::to_string(text->size()) +
                                               " bytes and its NUL");
    }
    std::memcpy(out_text, text->data(), text->size());
    out_text[text->size()] = '\0';
    return HETERO_OK;
  });
}

int32_t hetero_engine_vocab_size(const hetero_engine* engine) {
  return engine == nullptr ? 0 : engine->engine->tokenizer().vocab_size();
}

hetero_status hetero_session_create(hetero_engine* engine, const char* system_prompt, hetero_session** out_session) {
  return Guard("hetero_session_create", [&]() -> hetero_status {
    if (out_session == nullptr) return NullArgument("hetero_session_create", "out_session");
    *out_session = nullptr;
    if (engine == nullptr) return NullArgument("hetero_session_create", "engine");
    auto session = engine->engine->NewSession(system_prompt != nullptr ? system_prompt : "");
    if (!session.ok()) {
      // The only limit here is the number of live sessions: busy, not out of memory.
      if (absl::IsResourceExhausted(session.status())) {
        return Fail(HETERO_BUSY, std::string(session.status().message()));
      }
      return FromStatus(session.status());
    }
    *out_session = new hetero_session{std::move(*session)};
    return HETERO_OK;
  });
}

hetero_status hetero_session_save_state(hetero_session* session, uint8_t** out_bytes, size_t* out_size) {
  return Guard("hetero_session_save_state", [&]() -> hetero_status {
    if (out_bytes == nullptr) return NullArgument("hetero_session_save_state", "out_bytes");
    *out_bytes = nullptr;
    if (out_size == nullptr) return NullArgument("hetero_session_save_state", "out_size");
    *out_size = 0;
    if (session == nullptr) return NullArgument("hetero_session_save_state", "session");
    absl::StatusOr<std::string> state = session->session->SaveState();
    if (!state.ok()) return FromStatus(state.status());
    auto* bytes = static_cast<uint8_t*>(std::malloc(std::max<size_t>(1, state->size())));
    if (bytes == nullptr) return Fail(HETERO_OUT_OF_MEMORY, "hetero_session_save_state: no memory for the state");
    std::memcpy(bytes, state->data(), state->size());
    *out_bytes = bytes;
    *out_size = state->size();
    return HETERO_OK;
  });
}

hetero_status hetero_session_save_state_file(hetero_session* session, const char* path) {
  return Guard("hetero_session_save_state_file", [&]() -> hetero_status {
    if (session == nullptr) return NullArgument("hetero_session_save_state_file", "session");
    if (path == nullptr) return NullArgument("hetero_session_save_state_file", "path");
    return FromStatus(session->session->SaveStateToFile(path));
  });
}

void hetero_bytes_free(uint8_t* bytes) { std::free(bytes); }

hetero_status hetero_engine_save_expert_usage(const hetero_engine* engine, const char* path) {
  return Guard("hetero_engine_save_expert_usage", [&]() -> hetero_status {
    if (engine == nullptr) return NullArgument("hetero_engine_save_expert_usage", "engine");
    if (path == nullptr) return NullArgument("hetero_engine_save_expert_usage", "path");
    if (*path == '\0') return Fail(HETERO_INVALID_ARGUMENT, "hetero_engine_save_expert_usage: empty path");
    return FromStatus(engine->engine->SaveExpertUsage(path));
  });
}

hetero_status hetero_engine_load_adapter(hetero_engine* engine, const char* name, const char* path) {
  return Guard("hetero_engine_load_adapter", [&]() -> hetero_status {
    if (engine == nullptr) return NullArgument("hetero_engine_load_adapter", "engine");
    if (name == nullptr) return NullArgument("hetero_engine_load_adapter", "name");
    if (path == nullptr) return NullArgument("hetero_engine_load_adapter", "path");
    const absl::Status s = engine->engine->LoadAdapter(name, path);
    if (absl::IsAlreadyExists(s)) return Fail(HETERO_INVALID_ARGUMENT, std::string(s.message()));
    return FromStatus(s);
  });
}

hetero_status hetero_session_set_adapter(hetero_session* session, const char* name, float scale) {
  return Guard("hetero_session_set_adapter", [&]() -> hetero_status {
    if (session == nullptr) return NullArgument("hetero_session_set_adapter", "session");
    return FromStatus(session->session->SetAdapter(name == nullptr ? "" : name, scale));
  });
}

namespace {

// Restore's errors in C terms: state of another model is bad input, not a busy engine.
hetero_status RestoreResult(absl::StatusOr<std::unique_ptr<hetero::Session>> session, hetero_session** out) {
  if (!session.ok()) {
    if (absl::IsFailedPrecondition(session.status())) {
      return Fail(HETERO_INVALID_ARGUMENT, std::string(session.status().message()));
    }
    if (absl::IsResourceExhausted(session.status()) && absl::StrContains(session.status().message(), "sessions live")) {
      return Fail(HETERO_BUSY, std::string(session.status().message()));
    }
    return FromStatus(session.status());
  }
  *out = new hetero_session{std::move(*session)};
  return HETERO_OK;
}

}  // namespace

hetero_status hetero_engine_restore_session(hetero_engine* engine, const uint8_t* bytes, size_t size,
                                            hetero_session** out_session) {
  return Guard("hetero_engine_restore_session", [&]() -> hetero_status {
    if (out_session == nullptr) return NullArgument("hetero_engine_restore_session", "out_session");
    *out_session = nullptr;
    if (engine == nullptr) return NullArgument("hetero_engine_restore_session", "engine");
    if (bytes == nullptr) return NullArgument("hetero_engine_restore_session", "bytes");
    return RestoreResult(engine->engine->RestoreSession(std::string_view(reinterpret_cast<const char*>(bytes), size)),
                         out_session);
  });
}

hetero_status hetero_engine_restore_session_file(hetero_engine* engine, const char* path, hetero_session** out_session) {
  return Guard("hetero_engine_restore_session_file", [&]() -> hetero_status {
    if (out_session == nullptr) return NullArgument("hetero_engine_restore_session_file", "out_session");
    *out_session = nullptr;
    if (engine == nullptr) return NullArgument("hetero_engine_restore_session_file", "engine");
    if (path == nullptr) return NullArgument("hetero_engine_restore_session_file", "path");
    return RestoreResult(engine->engine->RestoreSessionFromFile(path), out_session);
  });
}

void hetero_session_destroy(hetero_session* session) {
  try {
    delete session;
  } catch (...) {
  }
}

hetero_status hetero_session_cancel(hetero_session* session) {
  return Guard("hetero_session_cancel", [&]() -> hetero_status {
    if (session == nullptr) return NullArgument("hetero_session_cancel", "session");
    session->session->Cancel();
    return HETERO_OK;
  });
}

void hetero_run_options_default(hetero_run_options* options) {
  if (options == nullptr) return;
  *options = hetero_run_options{};
  options->struct_size = sizeof(hetero_run_options);
  options->max_tokens = 256;
  options->top_p = 1.0f;
  options->max_tool_rounds = 4;
  options->constrain_tool_calls = 1;
  const hetero::SamplingParams sampling;
  options->min_p = sampling.min_p;
  options->repetition_penalty = sampling.repetition_penalty;
  options->frequency_penalty = sampling.frequency_penalty;
  options->presence_penalty = sampling.presence_penalty;
  options->penalty_window = sampling.penalty_window;
}

hetero_status hetero_session_run(hetero_session* session, const char* user_message, const hetero_run_options* options,
                                 hetero_result** out_result) {
  return Guard("hetero_session_run", [&]() -> hetero_status {
    if (out_result == nullptr) return NullArgument("hetero_session_run", "out_result");
    *out_result = nullptr;
    if (session == nullptr) return NullArgument("hetero_session_run", "session");
    if (user_message == nullptr) return NullArgument("hetero_session_run", "user_message");
    hetero_run_options o;
    if (hetero_status s = ReadOptions("hetero_session_run", options, o, hetero_run_options_default); s != HETERO_OK) {
      return s;
    }
    if (o.max_tokens < 1) return Fail(HETERO_INVALID_ARGUMENT, "hetero_session_run: max_tokens must be >= 1");
    if (o.max_tool_rounds < 0) return Fail(HETERO_INVALID_ARGUMENT, "hetero_session_run: max_tool_rounds must be >= 0");
    if (!(o.temperature >= 0) || !(o.top_p > 0 && o.top_p <= 1) || o.top_k < 0) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_session_run: temperature must be >= 0, top_p in (0, 1], top_k >= 0");
    }
    hetero::RunOptions run;
    run.max_tokens = o.max_tokens;
    run.sampling.temperature = o.temperature;
    run.sampling.top_k = o.top_k;
    run.sampling.top_p = o.top_p;
    run.sampling.seed = o.seed;
    // The sampler checks these ranges itself and names the one that is off.
    run.sampling.min_p = o.min_p;
    run.sampling.repetition_penalty = o.repetition_penalty;
    run.sampling.frequency_penalty = o.frequency_penalty;
    run.sampling.presence_penalty = o.presence_penalty;
    run.sampling.penalty_window = o.penalty_window;
    if (o.stop == nullptr && o.stop_count > 0) return NullArgument("hetero_session_run", "stop (stop_count > 0)");
    for (size_t i = 0; i < o.stop_count; ++i) {
      const std::string which = "stop[" + std::to_string(i) + "]";
      if (o.stop[i] == nullptr) return NullArgument("hetero_session_run", which.c_str());
      if (o.stop[i][0] == '\0') return Fail(HETERO_INVALID_ARGUMENT, "hetero_session_run: " + which + " is empty");
      run.stop.emplace_back(o.stop[i]);
    }
    if (o.response_schema_json != nullptr) run.response_schema_json = o.response_schema_json;
    if (o.logprobs != 0) {
      if (o.top_logprobs < 0 || o.top_logprobs > hetero::kMaxTopLogprobs) {
        return Fail(HETERO_INVALID_ARGUMENT, "hetero_session_run: top_logprobs is " + std::to_string(o.top_logprobs) +
                                                 ", expected 0 to " + std::to_string(hetero::kMaxTopLogprobs));
      }
      run.logprobs = o.top_logprobs;
    }
    run.timeout = std::chrono::milliseconds(o.timeout_ms);
    if (o.on_text != nullptr) {
      run.on_text = [callback = o.on_text, user_data = o.on_text_user_data](std::string_view piece) {
        return callback(piece.data(), piece.size(), user_data) == 0;
      };
    }
    if (o.on_token != nullptr) {
      run.on_token = [callback = o.on_token, user_data = o.on_token_user_data](int32_t token, float logprob) {
        return callback(token, logprob, user_data) == 0;
      };
    }
    if (o.tools != nullptr) run.tool_registry = o.tools->registry;
    run.max_tool_rounds = o.max_tool_rounds;
    run.constrain_tool_calls = o.constrain_tool_calls != 0;
    run.enable_thinking = o.disable_thinking == 0;
    auto result = session->session->Run(user_message, run);
    if (!result.ok()) return FromStatus(result.status());
    auto out = std::make_unique<hetero_result>();
    out->text = std::move(result->text);
    out->reasoning = std::move(result->reasoning);
    out->report_json = hetero::TaskReportJson(result->report);
    out->generated_tokens = result->report.generated_tokens;
    out->tool_calls = static_cast<int32_t>(result->report.tool_calls.size());
    out->logprobs = std::move(result->logprobs);
    *out_result = out.release();
    return HETERO_OK;
  });
}

void hetero_result_destroy(hetero_result* result) { delete result; }

const char* hetero_result_text(const hetero_result* result) { return result != nullptr ? result->text.c_str() : ""; }

const char* hetero_result_reasoning(const hetero_result* result) {
  return result != nullptr ? result->reasoning.c_str() : "";
}

const char* hetero_result_report_json(const hetero_result* result) {
  return result != nullptr ? result->report_json.c_str() : "{}";
}

int32_t hetero_result_generated_tokens(const hetero_result* result) {
  return result != nullptr ? result->generated_tokens : 0;
}

int32_t hetero_result_tool_call_count(const hetero_result* result) { return result != nullptr ? result->tool_calls : 0; }

size_t hetero_result_logprob_count(const hetero_result* result) {
  return result != nullptr ? result->logprobs.size() : 0;
}

hetero_status hetero_result_logprob(const hetero_result* result, size_t index, int32_t* out_token, float* out_logprob) {
  return Guard("hetero_result_logprob", [&]() -> hetero_status {
    if (result == nullptr) return NullArgument("hetero_result_logprob", "result");
    if (out_token == nullptr) return NullArgument("hetero_result_logprob", "out_token");
    if (out_logprob == nullptr) return NullArgument("hetero_result_logprob", "out_logprob");
    if (index >= result->logprobs.size()) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_result_logprob: index " + std::to_string(index) + " is past the " +
                                               std::to_string(result->logprobs.size()) + " entries");
    }
    *out_token = result->logprobs[index].token;
    *out_logprob = result->logprobs[index].logprob;
    return HETERO_OK;
  });
}

size_t hetero_result_top_logprob_count(const hetero_result* result, size_t index) {
  return result != nullptr && index < result->logprobs.size() ? result->logprobs[index].top.size() : 0;
}

hetero_status hetero_result_top_logprob(const hetero_result* result, size_t index, size_t rank, int32_t* out_token,
                                        float* out_logprob) {
  return Guard("hetero_result_top_logprob", [&]() -> hetero_status {
    if (result == nullptr) return NullArgument("hetero_result_top_logprob", "result");
    if (out_token == nullptr) return NullArgument("hetero_result_top_logprob", "out_token");
    if (out_logprob == nullptr) return NullArgument("hetero_result_top_logprob", "out_logprob");
    if (index >= result->logprobs.size()) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_result_top_logprob: index " + std::to_string(index) +
                                               " is past the " + std::to_string(result->logprobs.size()) + " entries");
    }
    const auto& top = result->logprobs[index].top;
    if (rank >= top.size()) {
      return Fail(HETERO_INVALID_ARGUMENT, "hetero_result_top_logprob: rank " + std::to_string(rank) + " is past the " +
                                               std::to_string(top.size()) + " alternatives");
    }
    *out_token = top[rank].first;
    *out_logprob = top[rank].second;
    return HETERO_OK;
  });
}

}  // extern "C"
