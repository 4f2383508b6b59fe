// hetero-serve: an OpenAI-compatible HTTP server over hetero's public API.
//
//   hetero-serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [-t THREADS]
//                [--scheduler NAME] [--model-name NAME] [--max-concurrent 16]
//                [--max-body-bytes 8388608] [--max-tokens 512] [--grace-seconds 10]
//                [--io-timeout 30] [--exit-with-parent] [--lora NAME=PATH]...
//
// Endpoints: POST /v1/chat/completions, /v1/completions, /v1/embeddings; GET /v1/models,
// /health, /metrics. docs/SERVER.md lists what each accepts; every other field is a 400
// naming it. SIGTERM or SIGINT drains: no new requests (503), in-flight ones get the grace
// period, then are cancelled.
#include <csignal>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "hetero/engine.h"
#include "hetero/log.h"
#include "hetero/model.h"
#include "hetero/version.h"
#include "server/client_connection.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace {

using Json = nlohmann::json;
using hetero::serve::RequestError;

struct Config {
  std::string model_path, host = "127.0.0.1", api_key, scheduler = "seed", model_name;
  int port = 8080, threads = 0, max_concurrent = 16, max_tokens = 512, grace_seconds = 10, io_timeout = 30;
  bool exit_with_parent = false;
  size_t max_body_bytes = 8 << 20;
  // --lora NAME=PATH: LoRA adapters, each served as a model of its own name (as vLLM does).
  std::vector<std::pair<std::string, std::string>> loras;
  // --gpu-memory-budget-mib: EngineOptions::gpu_memory_budget_bytes in MiB (0: none).
  uint64_t gpu_budget_mib = 0;
  // --expert-usage FILE: read at start where it exists (the expert placement within the
  // budget keeps the experts it counts most), written back with this run's counts added
  // when the server stops.
  std::string expert_usage_path;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Standard base64 of `bytes` (the embeddings' "base64" encoding).
std::string Base64(const void* data, size_t size) {
  static const char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t n = bytes[i] << 16 | (i + 1 < size ? bytes[i + 1] << 8 : 0) | (i + 2 < size ? bytes[i + 2] : 0);
    out += kDigits[n >> 18 & 63];
    out += kDigits[n >> 12 & 63];
    out += i + 1 < size ? kDigits[n >> 6 & 63] : '=';
    out += i + 2 < size ? kDigits[n & 63] : '=';
  }
  return out;
}

std::string FinishReason(const std::string& stop_reason) {
  return stop_reason == "max_tokens" ? "length" : stop_reason == "tool_calls" ? "tool_calls" : "stop";
}

// OpenAI's tool_calls array (with each call's index, for stream deltas).
Json ToolCallsJson(const std::vector<hetero::ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = {{"id", calls[i].id}, {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments_json}}}};
    if (with_index) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

// The server: the engine, the limits, and the sessions running now (cancelled on drain).
class Server {
 public:
  Server(Config config, std::unique_ptr<hetero::Engine> engine) : config_(std::move(config)), engine_(std::move(engine)) {}

  void Install(httplib::Server& http) {
    http.set_payload_max_length(config_.max_body_bytes);
    // Errors httplib produces itself (413, 404 of an unknown path, 400 of a bad request
    // line) in OpenAI's shape.
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      RequestError e;
      e.http_status = res.status;
      e.message = res.status == 413 ? "the request body is too large"
                  : res.status == 404 ? "no such endpoint"
                                      : "HTTP error " + std::to_string(res.status);
      res.set_content(hetero::serve::ErrorJson(e), "application/json");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.status = draining_ ? 503 : 200;
      res.set_content(draining_ ? R"({"status":"draining"})" : R"({"status":"ok"})", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res, "/metrics")) return;
      res.set_content(metrics_.Render(*engine_, running_.load(), 0), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res, "/v1/models")) return;
      Json models = {{"object", "list"},
                     {"data", Json::array({{{"id", config_.model_name}, {"object", "model"}, {"created", started_},
                                            {"owned_by", "hetero"}}})}};
      for (const auto& [name, path] : config_.loras) {
        models["data"].push_back({{"id", name}, {"object", "model"}, {"created", started_}, {"owned_by", "hetero"},
                                  {"parent", config_.model_name}});
      }
      Reply(res, "/v1/models", 200, models.dump());
    });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { Chat(req, res); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { Complete(req, res); });
    http.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) { Embed(req, res); });
  }

  // Drain: refuse new requests, give in-flight ones the grace period, cancel the rest.
  void Drain() {
    draining_ = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(config_.grace_seconds);
    while (running_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (hetero::Session* s : sessions_) s->Cancel();
  }
  int running() const { return running_.load(); }
  const hetero::Engine& engine() const { return *engine_; }

 private:
  // Admission: the concurrency limit and draining, counted while the guard lives.
  class Slot {
   public:
    explicit Slot(Server& s) : server_(s) { admitted_ = ++server_.running_ <= server_.config_.max_concurrent; }
    ~Slot() { --server_.running_; }
    bool admitted() const { return admitted_; }

   private:
    Server& server_;
    bool admitted_;
  };
  // Registers a session for cancellation on drain.
  class Tracked {
   public:
    Tracked(Server& s, hetero::Session* session) : server_(s), session_(session) {
      std::lock_guard<std::mutex> lock(server_.sessions_mu_);
      server_.sessions_.insert(session_);
    }
    ~Tracked() {
      std::lock_guard<std::mutex> lock(server_.sessions_mu_);
      server_.sessions_.erase(session_);
    }

   private:
    Server& server_;
    hetero::Session* session_;
  };

  void Reply(httplib::Response& res, const std::string& endpoint, int status, const std::string& body) {
    res.status = status;
    res.set_content(body, "application/json");
    metrics_.CountRequest(endpoint, status);
  }
  void Error(httplib::Response& res, const std::string& endpoint, RequestError e) {
    if (e.http_status == 429) res.set_header("Retry-After", "1");
    if (e.http_status >= 500) e.type = "server_error";
    Reply(res, endpoint, e.http_status, hetero::serve::ErrorJson(e));
  }
  void StatusError(httplib::Response& res, const std::string& endpoint, const absl::Status& s) {
    RequestError e;
    e.message = std::string(s.message());
    switch (s.code()) {
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kOutOfRange:
        e.http_status = 400;
        break;
      case absl::StatusCode::kUnavailable:
      case absl::StatusCode::kResourceExhausted:
        e.http_status = 429;
        e.type = "rate_limit_error";
        break;
      case absl::StatusCode::kDeadlineExceeded:
        e.http_status = 504;
        break;
      case absl::StatusCode::kCancelled:  // the client went away (nginx's "client closed request")
        e.http_status = 499;
        break;
      case absl::StatusCode::kUnimplemented:
        e.http_status = 400;
        break;
      default:
        e.http_status = 500;
    }
    Error(res, endpoint, e);
  }

  bool Authorized(const httplib::Request& req, httplib::Response& res, const std::string& endpoint) {
    if (config_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + config_.api_key) return true;
    RequestError e;
    e.http_status = 401;
    e.message = "missing or wrong API key (Authorization: Bearer ...)";
    Error(res, endpoint, e);
    return false;
  }
  // Authorization, draining, the concurrency limit and the model name, in that order.
  bool Admit(const httplib::Request& req, httplib::Response& res, const std::string& endpoint, const Slot& slot) {
    if (!Authorized(req, res, endpoint)) return false;
    RequestError e;
    if (draining_) {
      e.http_status = 503;
      e.message = "the server is shutting down";
      Error(res, endpoint, e);
      return false;
    }
    if (!slot.admitted()) {
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.message = "too many concurrent requests (--max-concurrent " + std::to_string(config_.max_concurrent) + ")";
      Error(res, endpoint, e);
      return false;
    }
    return true;
  }
  // The base model, or (where `adapter` is given) one of the --lora adapters, whose name is
  // then set in *adapter ("" for the base model).
  bool KnownModel(const std::string& model, httplib::Response& res, const std::string& endpoint,
                  std::string* adapter = nullptr) {
    if (model == config_.model_name) return true;
    for (const auto& [name, path] : config_.loras) {
      if (model != name) continue;
      if (adapter != nullptr) {
        *adapter = name;
        return true;
      }
      RequestError e;
      e.param = "model";
      e.message = "'" + model + "' is a LoRA adapter; " + endpoint + " uses the base model '" + config_.model_name + "'";
      Error(res, endpoint, e);
      return false;
    }
    RequestError e;
    e.http_status = 404;
    e.param = "model";
    std::string served = "'" + config_.model_name + "'";
    for (const auto& [name, path] : config_.loras) served += ", '" + name + "'";
    e.message = "the model '" + model + "' does not exist; this server serves " + served;
    Error(res, endpoint, e);
    return false;
  }

  Json Usage(const hetero::TaskReport& r) const {
    return {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.generated_tokens},
            {"total_tokens", r.prompt_tokens + r.generated_tokens}};
  }
  Json Logprobs(const std::vector<hetero::TokenLogprob>& tokens) const {
    const auto entry = [this](int32_t id, float logprob) {
      const std::string text = engine_->tokenizer().Decode({id}).value_or("");
      Json bytes = Json::array();
      for (unsigned char c : text) bytes.push_back(c);
      return Json{{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
    };
    Json content = Json::array();
    for (const hetero::TokenLogprob& t : tokens) {
      Json e = entry(t.token, t.logprob);
      e["top_logprobs"] = Json::array();
      for (const auto& [id, lp] : t.top) e["top_logprobs"].push_back(entry(id, lp));
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  static std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
  // A whole (not streamed) response: one choice, usage, and the task report as `hetero`.
  Json Response(const std::string& id, const char* object, const std::string& model, Json choice,
               const hetero::TaskReport& report) const {
    return {{"id", id},
            {"object", object},
            {"created", Now()},
            {"model", model},
            {"choices", Json::array({std::move(choice)})},
            {"usage", Usage(report)},
            {"hetero", Json::parse(hetero::TaskReportJson(report))}};
  }
  // One server-sent event; false when the client has gone.
  static bool Event(httplib::DataSink& sink, const std::string& data) {
    const std::string line = "data: " + data + "\n\n";
    return sink.write(line.data(), line.size());
  }
  static void EndStream(httplib::DataSink& sink) {
    Event(sink, "[DONE]");
    sink.done();
  }
  std::string NextId(const char* prefix) { return std::string(prefix) + std::to_string(++next_id_); }

  void Chat(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/v1/chat/completions";
    auto slot = std::make_shared<Slot>(*this);
    if (!Admit(req, res, endpoint, *slot)) return;
    auto request = std::make_shared<hetero::serve::ChatRequest>();
    RequestError e;
    if (!hetero::serve::ParseChatRequest(req.body, config_.max_tokens, *request, e)) return Error(res, endpoint, e);
    std::string adapter;
    if (!KnownModel(request->model, res, endpoint, &adapter)) return;
    absl::StatusOr<std::unique_ptr<hetero::Session>> created = engine_->NewSessionWithHistory(request->history);
    if (!created.ok()) return StatusError(res, endpoint, created.status());
    std::shared_ptr<hetero::Session> session = std::move(*created);
    if (absl::Status s = session->SetAdapter(adapter); !s.ok()) return StatusError(res, endpoint, s);
    const std::string id = NextId("chatcmpl-");
    if (!request->stream) {
      Tracked tracked(*this, session.get());
      // A client that closes its connection cancels the run at its next piece of text.
      const hetero::serve::ClientConnection client =
          hetero::serve::ClientConnection::Find(req.remote_addr, req.remote_port, req.local_port);
      hetero::RunOptions run = request->run;
      run.on_text = [client](std::string_view) { return client.Open(); };
      absl::StatusOr<hetero::RunResult> result =
          request->resume ? session->Continue(run) : session->Run(request->user_message, run);
      if (!result.ok()) return StatusError(res, endpoint, result.status());
      metrics_.CountGeneration(result->report);
      Json message = {{"role", "assistant"}, {"content", result->text}};
      if (!result->reasoning.empty()) message["reasoning_content"] = result->reasoning;
      if (!result->tool_calls.empty()) {
        if (result->text.empty()) message["content"] = nullptr;
        message["tool_calls"] = ToolCallsJson(result->tool_calls, /*with_index=*/false);
      }
      Json choice = {{"index", 0},
                     {"message", std::move(message)},
                     {"finish_reason", FinishReason(result->report.stop_reason)},
                     {"logprobs", request->run.logprobs >= 0 ? Logprobs(result->logprobs) : Json(nullptr)}};
      return Reply(res, endpoint, 200, Dump(Response(id, "chat.completion", request->model, std::move(choice), result->report)));
    }
    // Server-sent events: a role chunk, a chunk per piece of text, the finish chunk, the
    // usage chunk when asked, then [DONE]. A client that goes away cancels the run.
    metrics_.CountRequest(endpoint, 200);
    const int64_t created_at = Now();
    const std::string model = request->model;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, slot, request, session, id, created_at, model](
                                                             size_t, httplib::DataSink& sink) mutable {
      const auto chunk = [&](Json delta, Json finish, Json usage = nullptr) {
        Json j = {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created_at}, {"model", model},
                  {"choices", Json::array()}};
        if (!delta.is_null()) j["choices"].push_back({{"index", 0}, {"delta", delta}, {"finish_reason", finish}, {"logprobs", nullptr}});
        if (!usage.is_null()) j["usage"] = usage;
        return Event(sink, Dump(j));
      };
      if (!chunk({{"role", "assistant"}, {"content", ""}}, nullptr)) return false;
      hetero::RunOptions run = request->run;
      run.on_text = [&](std::string_view piece) { return chunk({{"content", std::string(piece)}}, nullptr); };
      run.on_reasoning = [&](std::string_view piece) {
        return chunk({{"reasoning_content", std::string(piece)}}, nullptr);
      };
      absl::StatusOr<hetero::RunResult> result = absl::UnknownError("not run");
      {
        Tracked tracked(*this, session.get());
        result = request->resume ? session->Continue(run) : session->Run(request->user_message, run);
      }
      // The session's KV and the concurrency slot go before the last bytes do: a client that
      // sends its next request as soon as it reads [DONE] finds both free.
      session.reset();
      slot.reset();
      if (result.ok()) {
        metrics_.CountGeneration(result->report);
        // The calls in one delta once the reply is complete, each with its index.
        if (!result->tool_calls.empty()) chunk({{"tool_calls", ToolCallsJson(result->tool_calls, true)}}, nullptr);
        chunk(Json::object(), FinishReason(result->report.stop_reason));
        if (request->include_usage) chunk(nullptr, nullptr, Usage(result->report));
      } else if (!absl::IsCancelled(result.status())) {
        RequestError e;
        e.http_status = 500;
        e.type = "server_error";
        e.message = std::string(result.status().message());
        Event(sink, hetero::serve::ErrorJson(e));
      }
      EndStream(sink);
      return true;
    });
  }

  void Complete(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/v1/completions";
    auto slot = std::make_shared<Slot>(*this);
    if (!Admit(req, res, endpoint, *slot)) return;
    auto request = std::make_shared<hetero::serve::CompletionRequest>();
    RequestError e;
    if (!hetero::serve::ParseCompletionRequest(req.body, config_.max_tokens, *request, e)) return Error(res, endpoint, e);
    if (!KnownModel(request->model, res, endpoint, &request->options.adapter)) return;
    const std::string id = NextId("cmpl-");
    if (!request->stream) {
      const hetero::serve::ClientConnection client =
          hetero::serve::ClientConnection::Find(req.remote_addr, req.remote_port, req.local_port);
      hetero::CompletionOptions options = request->options;
      options.on_text = [client](std::string_view) { return client.Open(); };
      absl::StatusOr<hetero::CompletionResult> result = engine_->Complete(request->prompt, options);
      if (!result.ok()) return StatusError(res, endpoint, result.status());
      metrics_.CountGeneration(result->report);
      Json choice = {{"index", 0},
                     {"text", (request->echo ? request->prompt : "") + result->text},
                     {"finish_reason", FinishReason(result->report.stop_reason)},
                     {"logprobs", nullptr}};
      return Reply(res, endpoint, 200, Dump(Response(id, "text_completion", request->model, std::move(choice), result->report)));
    }
    metrics_.CountRequest(endpoint, 200);
    const int64_t created_at = Now();
    const std::string model = request->model;
    res.set_chunked_content_provider("text/event-stream", [this, slot, request, id, created_at, model](
                                                             size_t, httplib::DataSink& sink) mutable {
      const auto chunk = [&](const std::string& text, Json finish, Json usage = nullptr) {
        Json j = {{"id", id}, {"object", "text_completion"}, {"created", created_at}, {"model", model},
                  {"choices", Json::array({{{"index", 0}, {"text", text}, {"finish_reason", finish}, {"logprobs", nullptr}}})}};
        if (!usage.is_null()) {
          j["choices"] = Json::array();
          j["usage"] = usage;
        }
        return Event(sink, Dump(j));
      };
      if (request->echo && !chunk(request->prompt, nullptr)) return false;
      hetero::CompletionOptions options = request->options;
      options.on_text = [&](std::string_view piece) { return chunk(std::string(piece), nullptr); };
      absl::StatusOr<hetero::CompletionResult> result = engine_->Complete(request->prompt, options);
      slot.reset();  // free before the last bytes go (see Chat)
      if (result.ok()) {
        metrics_.CountGeneration(result->report);
        chunk("", FinishReason(result->report.stop_reason));
        if (request->include_usage) chunk("", nullptr, Usage(result->report));
      }
      EndStream(sink);
      return true;
    });
  }

  void Embed(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/v1/embeddings";
    Slot slot(*this);
    if (!Admit(req, res, endpoint, slot)) return;
    hetero::serve::EmbeddingRequest request;
    RequestError e;
    if (!hetero::serve::ParseEmbeddingRequest(req.body, request, e)) return Error(res, endpoint, e);
    if (!KnownModel(request.model, res, endpoint)) return;
    absl::StatusOr<hetero::EmbedResult> result = engine_->EmbedWithReport(request.inputs);
    if (!result.ok()) return StatusError(res, endpoint, result.status());
    const int tokens = result->report.tokens_in;  // the stage counted them
    Json data = Json::array();
    for (size_t i = 0; i < result->embeddings.size(); ++i) {
      const std::vector<float>& v = result->embeddings[i];
      data.push_back({{"object", "embedding"},
                      {"index", i},
                      {"embedding", request.base64 ? Json(Base64(v.data(), v.size() * sizeof(float))) : Json(v)}});
    }
    Json body = {{"object", "list"},
                 {"data", data},
                 {"model", config_.model_name},
                 {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}},
                 {"hetero", {{"device", hetero::DeviceName(result->report.device)}, {"reason", result->report.reason},
                             {"ms", result->report.end_ms - result->report.start_ms}}}};
    Reply(res, endpoint, 200, Dump(body));
  }

  Config config_;
  std::unique_ptr<hetero::Engine> engine_;
  hetero::serve::Metrics metrics_;
  std::atomic<int> running_{0};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{0};
  const int64_t started_ = Now();
  std::mutex sessions_mu_;
  std::set<hetero::Session*> sessions_;
};

constexpr char kUsage[] =
    "usage: hetero-serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [-t THREADS]\n"
    "                    [--scheduler NAME] [--model-name NAME] [--max-concurrent 16]\n"
    "                    [--max-body-bytes 8388608] [--max-tokens 512] [--grace-seconds 10]\n"
    "                    [--io-timeout 30] [--exit-with-parent] [--lora NAME=PATH]...\n"
    "                    [--gpu-memory-budget-mib MIB] [--expert-usage FILE]\n";

}  // namespace

int main(int argc, char** argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(Fail("option " + a + " needs a value"));
      return argv[++i];
    };
    auto number = [&](auto& out, long long low) {
      const std::string v = value();
      long long n = 0;
      if (!absl::SimpleAtoi(v, &n) || n < low) std::exit(Fail("option " + a + ": '" + v + "' is not a number >= " + std::to_string(low)));
      out = static_cast<std::decay_t<decltype(out)>>(n);
    };
    if (a == "-m") config.model_path = value();
    else if (a == "--host") config.host = value();
    else if (a == "--port") number(config.port, 0);
    else if (a == "--api-key") config.api_key = value();
    else if (a == "-t") number(config.threads, 0);
    else if (a == "--scheduler") config.scheduler = value();
    else if (a == "--model-name") config.model_name = value();
    else if (a == "--max-concurrent") number(config.max_concurrent, 1);
    else if (a == "--max-body-bytes") number(config.max_body_bytes, 1024);
    else if (a == "--max-tokens") number(config.max_tokens, 1);
    else if (a == "--grace-seconds") number(config.grace_seconds, 0);
    else if (a == "--exit-with-parent") config.exit_with_parent = true;
    else if (a == "--io-timeout") number(config.io_timeout, 1);
    else if (a == "--gpu-memory-budget-mib") number(config.gpu_budget_mib, 1);
    else if (a == "--expert-usage") config.expert_usage_path = value();
    else if (a == "--lora") {
      const std::string v = value();
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) return Fail("--lora wants NAME=PATH, not '" + v + "'");
      config.loras.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    }
    else if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else {
      return Fail("unknown option '" + a + "' (try --help)");
    }
  }
  if (config.port > 65535) return Fail("--port must be at most 65535");
  // The signals are taken by one thread (sigwait), so they are masked everywhere else.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  hetero::SetLogCallback(hetero::LogToStderr, hetero::LogLevel::kWarning);

  hetero::EngineOptions options;
  options.threads = config.threads;
  options.scheduler = config.scheduler;
  options.max_sessions = config.max_concurrent + 8;
  options.max_batch = config.max_concurrent;
  if (config.gpu_budget_mib > (uint64_t{1} << 40)) return Fail("--gpu-memory-budget-mib is over 2^40 MiB");
  options.gpu_memory_budget_bytes = config.gpu_budget_mib << 20;
  if (!config.expert_usage_path.empty()) {
    // A file that is not there yet is the first run's: this run's counts start it. Where it
    // would go must exist now, not only when the counts are written at the stop.
    std::error_code error;
    const std::filesystem::path usage(config.expert_usage_path);
    const bool exists = std::filesystem::exists(usage, error);
    if (error) return Fail("--expert-usage " + config.expert_usage_path + ": " + error.message());
    const std::filesystem::path dir = usage.parent_path().empty() ? "." : usage.parent_path();
    if (!std::filesystem::is_directory(dir, error)) {
      return Fail("--expert-usage " + config.expert_usage_path + ": no directory " + dir.string());
    }
    if (exists) options.expert_usage_path = config.expert_usage_path;
  }
  auto engine = hetero::Engine::Create(config.model_path, options);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));
  if (config.model_name.empty()) {
    const absl::StatusOr<std::string> resolved = hetero::ResolveModelPath(config.model_path);
    config.model_name = std::filesystem::path(resolved.ok() ? *resolved : "model").stem().string();
  }
  for (const auto& [name, path] : config.loras) {
    if (name == config.model_name) return Fail("--lora " + name + ": the base model has that name");
    if (absl::Status s = (*engine)->LoadAdapter(name, path); !s.ok()) {
      return Fail("--lora " + name + "=" + path + ": " + std::string(s.message()));
    }
  }
  Server server(config, std::move(*engine));
  httplib::Server http;
  const int workers = config.max_concurrent + 4;  // over the limit: 429 answered, not queued
  http.new_task_queue = [workers] { return new httplib::ThreadPool(static_cast<size_t>(workers)); };
  // A client that stalls sending its request, or stops reading a stream, is dropped after
  // --io-timeout seconds (its stream's generation then ends as cancelled).
  http.set_read_timeout(std::chrono::seconds(config.io_timeout));
  http.set_write_timeout(std::chrono::seconds(config.io_timeout));
  server.Install(http);
  if (!http.bind_to_port(config.host, config.port)) {
    return Fail("cannot listen on " + config.host + ":" + std::to_string(config.port));
  }
  std::thread signal_thread([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    std::fprintf(stderr, "hetero-serve: signal %d, draining (%d in flight, grace %d s)\n", signal, server.running(),
                 config.grace_seconds);
    server.Drain();
    http.stop();
  });
  // A supervisor that starts us (a Ray Serve replica) may be killed without a chance to stop
  // us: when our parent changes, drain as on SIGTERM.
  if (config.exit_with_parent) {
    const pid_t parent = getppid();
    std::thread([parent] {
      while (getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(250));
      kill(getpid(), SIGTERM);
    }).detach();
  }
  std::fprintf(stderr, "hetero-serve %s: serving '%s' on http://%s:%d\n", hetero::VersionString(),
               config.model_name.c_str(), config.host.c_str(), config.port);
  http.listen_after_bind();
  signal_thread.join();
  if (!config.expert_usage_path.empty()) {
    if (absl::Status s = server.engine().SaveExpertUsage(config.expert_usage_path); !s.ok()) {
      return Fail("--expert-usage: " + std::string(s.message()));
    }
    std::fprintf(stderr, "hetero-serve: expert usage written to %s\n", config.expert_usage_path.c_str());
  }
  return 0;
}
