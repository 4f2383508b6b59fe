#include "server/openai_request.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

namespace hetero::serve {

namespace {

using Json = nlohmann::json;

// Parsing state: the first error wins and names its field.
struct Fields {
  const Json& body;
  RequestError& error;

  bool Fail(std::string param, std::string message, int status = 400) {
    error.http_status = status;
    error.param = std::move(param);
    error.message = std::move(message);
    return false;
  }
  bool Has(const char* key) const { return body.contains(key) && !body[key].is_null(); }

  // Every key must be one this endpoint knows.
  bool OnlyKnown(const std::set<std::string>& known, const std::set<std::string>& not_yet) {
    for (const auto& [key, value] : body.items()) {
      if (not_yet.count(key) != 0) {
        return Fail(key, "'" + key + "' is not supported by hetero-serve yet");
      }
      if (known.count(key) == 0) return Fail(key, "unknown field '" + key + "'");
    }
    return true;
  }
  bool String(const char* key, std::string& out, bool required) {
    if (!Has(key)) return required ? Fail(key, "'" + std::string(key) + "' is required") : true;
    if (!body[key].is_string()) return Fail(key, "'" + std::string(key) + "' must be a string");
    out = body[key].get<std::string>();
    return true;
  }
  bool Bool(const char* key, bool& out) {
    if (!Has(key)) return true;
    if (!body[key].is_boolean()) return Fail(key, "'" + std::string(key) + "' must be a boolean");
    out = body[key].get<bool>();
    return true;
  }
  bool Number(const char* key, double low, double high, float& out) {
    if (!Has(key)) return true;
    if (!body[key].is_number()) return Fail(key, "'" + std::string(key) + "' must be a number");
    const double v = body[key].get<double>();
    if (!(v >= low && v <= high)) {
      return Fail(key, "'" + std::string(key) + "' must be between " + Short(low) + " and " + Short(high));
    }
    out = static_cast<float>(v);
    return true;
  }
  bool Integer(const char* key, int64_t low, int64_t high, int64_t& out) {
    if (!Has(key)) return true;
    if (!body[key].is_number_integer()) return Fail(key, "'" + std::string(key) + "' must be an integer");
    const int64_t v = body[key].is_number_unsigned() && body[key].get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                          ? INT64_MAX
                          : body[key].get<int64_t>();
    if (v < low || v > high) {
      return Fail(key, "'" + std::string(key) + "' must be between " + std::to_string(low) + " and " + std::to_string(high));
    }
    out = v;
    return true;
  }
  // `stop`: a string or up to 4 strings, none empty.
  bool Stop(std::vector<std::string>& out) {
    if (!Has("stop")) return true;
    const Json& stop = body["stop"];
    if (stop.is_string()) {
      if (stop.get<std::string>().empty()) return Fail("stop", "'stop' must not be empty");
      out = {stop.get<std::string>()};
      return true;
    }
    if (!stop.is_array() || stop.size() > 4) return Fail("stop", "'stop' must be a string or an array of up to 4 strings");
    for (const Json& s : stop) {
      if (!s.is_string() || s.get<std::string>().empty()) return Fail("stop", "'stop' entries must be non-empty strings");
      out.push_back(s.get<std::string>());
    }
    return true;
  }
  bool MaxTokens(int default_tokens, int& out) {
    int64_t v = default_tokens;
    for (const char* key : {"max_completion_tokens", "max_tokens"}) {
      if (!Integer(key, 1, 1 << 20, v)) return false;
      if (Has(key)) break;
    }
    out = static_cast<int>(v);
    return true;
  }
  bool StreamOptions(bool stream, bool& include_usage) {
    if (!Has("stream_options")) return true;
    const Json& o = body["stream_options"];
    if (!stream) return Fail("stream_options", "'stream_options' is only allowed with stream: true");
    if (!o.is_object()) return Fail("stream_options", "'stream_options' must be an object");
    for (const auto& [key, value] : o.items()) {
      if (key != "include_usage") return Fail("stream_options." + key, "unknown field 'stream_options." + key + "'");
      if (!value.is_boolean()) return Fail("stream_options.include_usage", "'include_usage' must be a boolean");
      include_usage = value.get<bool>();
    }
    return true;
  }
  bool N() {
    int64_t n = 1;
    if (!Integer("n", 1, 1, n)) return Fail("n", "'n' must be 1 (one choice per request)");
    return true;
  }

  static std::string Short(double v) {
    std::string s = std::to_string(v);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
};

bool ParseBody(const std::string& text, Json& body, RequestError& error) {
  body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    error.message = "the request body is not valid JSON";
    return false;
  }
  if (!body.is_object()) {
    error.message = "the request body must be a JSON object";
    return false;
  }
  return true;
}

// A message's text: a string, or an array of {"type": "text", "text": ...} parts.
bool MessageText(const Json& content, const std::string& param, std::string& out, Fields& f) {
  if (content.is_null()) return true;
  if (content.is_string()) {
    out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) return f.Fail(param, "'content' must be a string or an array of text parts");
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return f.Fail(param + "[" + std::to_string(i) + "]", "only text content parts are supported");
    }
    out += part["text"].get<std::string>();
  }
  return true;
}

bool Sampling(Fields& f, SamplingParams& s) {
  int64_t seed = 0;
  if (!f.Number("temperature", 0, 2, s.temperature) || !f.Number("top_p", 1e-6, 1, s.top_p) ||
      !f.Number("frequency_penalty", -2, 2, s.frequency_penalty) ||
      !f.Number("presence_penalty", -2, 2, s.presence_penalty) || !f.Integer("seed", INT64_MIN, INT64_MAX, seed)) {
    return false;
  }
  s.seed = static_cast<uint64_t>(seed);
  return true;
}

// `tools`, `tool_choice` and `parallel_tool_calls` into a registry the model's calls are held
// to; the server's client runs the tools (RunOptions::return_tool_calls).
bool Tools(Fields& f, RunOptions& run) {
  const Json& body = f.body;
  std::string choice = "auto";
  std::string named;
  if (f.Has("tool_choice")) {
    const Json& c = body["tool_choice"];
    if (c.is_string() && (c == "none" || c == "auto" || c == "required")) {
      choice = c.get<std::string>();
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      choice = "named";
      named = c["function"]["name"].get<std::string>();
    } else {
      return f.Fail("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  }
  bool parallel = true;
  if (!f.Bool("parallel_tool_calls", parallel)) return false;
  if (!f.Has("tools")) {
    if (choice == "required" || choice == "named") return f.Fail("tool_choice", "'tool_choice' needs 'tools'");
    return true;
  }
  if (!body["tools"].is_array() || body["tools"].empty() || body["tools"].size() > 128) {
    return f.Fail("tools", "'tools' must be an array of 1 to 128 tools");
  }
  if (choice == "none") return true;  // described to nobody: the model answers
  if (!run.response_schema_json.empty()) {
    return f.Fail("response_format", "'response_format' with 'tools' is not supported by hetero-serve yet");
  }
  auto registry = std::make_shared<ToolRegistry>();
  for (size_t i = 0; i < body["tools"].size(); ++i) {
    const Json& t = body["tools"][i];
    const std::string param = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object()) {
      return f.Fail(param, "a tool must be {\"type\": \"function\", \"function\": {...}}");
    }
    const Json& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) return f.Fail(param + ".function.name", "a function needs a 'name'");
    Tool tool;
    tool.name = fn["name"].get<std::string>();
    tool.description = fn.contains("description") && fn["description"].is_string() ? fn["description"].get<std::string>() : "";
    tool.parameters_json = fn.contains("parameters") && fn["parameters"].is_object()
                               ? fn["parameters"].dump()
                               : std::string(R"({"type": "object", "properties": {}})");
    // Never called: the calls go back to the client (return_tool_calls).
    tool.handler = [](const std::string&) -> absl::StatusOr<std::string> {
      return absl::InternalError("hetero-serve returns tool calls to its client");
    };
    if (absl::Status s = registry->Register(std::move(tool)); !s.ok()) return f.Fail(param, std::string(s.message()));
  }
  if (choice == "named" && registry->Find(named) == nullptr) {
    return f.Fail("tool_choice", "'tool_choice' names '" + named + "', which is not one of 'tools'");
  }
  run.tool_registry = std::move(registry);
  run.return_tool_calls = true;
  run.tool_choice = choice == "required" ? RunOptions::ToolChoice::kRequired
                    : choice == "named"  ? RunOptions::ToolChoice::kNamed
                                         : RunOptions::ToolChoice::kAuto;
  run.tool_choice_name = named;
  run.max_parallel_calls = parallel ? 0 : 1;
  return true;
}

}  // namespace

bool ParseChatRequest(const std::string& text, int max_tokens_default, ChatRequest& out, RequestError& error) {
  Json body;
  if (!ParseBody(text, body, error)) return false;
  Fields f{body, error};
  if (!f.OnlyKnown({"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop",
                    "stream", "stream_options", "response_format", "n", "frequency_penalty", "presence_penalty",
                    "logprobs", "top_logprobs", "user", "tools", "tool_choice", "parallel_tool_calls"},
                   {"functions", "function_call", "logit_bias", "audio", "modalities", "prediction"})) {
    return false;
  }
  if (!f.String("model", out.model, true) || !f.N() || !f.MaxTokens(max_tokens_default, out.run.max_tokens) ||
      !Sampling(f, out.run.sampling) || !f.Stop(out.run.stop) || !f.Bool("stream", out.stream) ||
      !f.StreamOptions(out.stream, out.include_usage)) {
    return false;
  }
  bool logprobs = false;
  int64_t top = 0;
  if (!f.Bool("logprobs", logprobs) || !f.Integer("top_logprobs", 0, kMaxTopLogprobs, top)) return false;
  if (f.Has("top_logprobs") && !logprobs) return f.Fail("top_logprobs", "'top_logprobs' needs logprobs: true");
  out.run.logprobs = logprobs ? static_cast<int>(top) : -1;
  if (f.Has("response_format")) {
    const Json& format = body["response_format"];
    if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
      return f.Fail("response_format", "'response_format' must be an object with a 'type'");
    }
    const std::string type = format["type"].get<std::string>();
    if (type == "json_object") {
      out.run.response_schema_json = R"({"type": "object"})";
    } else if (type == "json_schema") {
      if (!format.contains("json_schema") || !format["json_schema"].is_object() ||
          !format["json_schema"].contains("schema") || !format["json_schema"]["schema"].is_object()) {
        return f.Fail("response_format.json_schema", "'json_schema' must be an object with a 'schema' object");
      }
      out.run.response_schema_json = format["json_schema"]["schema"].dump();
    } else if (type != "text") {
      return f.Fail("response_format.type", "'type' must be 'text', 'json_object' or 'json_schema'");
    }
  }
  if (!f.Has("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    return f.Fail("messages", "'messages' must be a non-empty array");
  }
  const Json& messages = body["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    const Json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return f.Fail(param + ".role", "each message needs a 'role' string");
    }
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return f.Fail(param + ".role", "'role' must be system, developer, user, assistant or tool");
    }
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content" && key != "name" && key != "tool_calls" && key != "tool_call_id" &&
          key != "refusal") {
        return f.Fail(param + "." + key, "unknown field '" + key + "'");
      }
    }
    if (!m.contains("content") && role != "assistant") return f.Fail(param + ".content", "'content' is required");
    ChatMessage message{role, ""};
    if (m.contains("content") && !MessageText(m["content"], param + ".content", message.content, f)) return false;
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (role != "assistant" || !m["tool_calls"].is_array()) {
        return f.Fail(param + ".tool_calls", "'tool_calls' must be an array, on an assistant message");
      }
      for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
        const Json& c = m["tool_calls"][k];
        const std::string cp = param + ".tool_calls[" + std::to_string(k) + "]";
        if (!c.is_object() || !c.contains("id") || !c["id"].is_string() || !c.contains("function") ||
            !c["function"].is_object() || !c["function"].contains("name") || !c["function"]["name"].is_string() ||
            !c["function"].contains("arguments") || !c["function"]["arguments"].is_string()) {
          return f.Fail(cp, "a tool call needs an 'id' and a 'function' with 'name' and 'arguments' strings");
        }
        message.tool_calls.push_back({c["id"].get<std::string>(), c["function"]["name"].get<std::string>(),
                                      c["function"]["arguments"].get<std::string>()});
      }
    }
    if (role == "tool") {
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string()) {
        return f.Fail(param + ".tool_call_id", "a tool message needs its 'tool_call_id'");
      }
      message.tool_call_id = m["tool_call_id"].get<std::string>();
      // The tool's name, from the call it answers.
      for (const ChatMessage& earlier : out.history) {
        for (const ToolCall& call : earlier.tool_calls) {
          if (call.id == message.tool_call_id) message.name = call.name;
        }
      }
      if (message.name.empty()) return f.Fail(param + ".tool_call_id", "no earlier tool call has this id");
    }
    if (i + 1 == messages.size()) {
      if (role == "tool") {
        out.resume = true;
        out.history.push_back(std::move(message));
      } else if (role == "user") {
        out.user_message = std::move(message.content);
      } else {
        return f.Fail(param + ".role", "the last message must be the user's or a tool result");
      }
    } else {
      out.history.push_back(std::move(message));
    }
  }
  return Tools(f, out.run);
}

bool ParseCompletionRequest(const std::string& text, int max_tokens_default, CompletionRequest& out,
                            RequestError& error) {
  Json body;
  if (!ParseBody(text, body, error)) return false;
  Fields f{body, error};
  if (!f.OnlyKnown({"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options",
                    "n", "frequency_penalty", "presence_penalty", "echo", "user"},
                   {"logprobs", "suffix", "best_of", "logit_bias"})) {
    return false;
  }
  if (!f.String("model", out.model, true) || !f.N() || !f.MaxTokens(max_tokens_default, out.options.max_tokens) ||
      !Sampling(f, out.options.sampling) || !f.Stop(out.options.stop) || !f.Bool("stream", out.stream) ||
      !f.StreamOptions(out.stream, out.include_usage) || !f.Bool("echo", out.echo)) {
    return false;
  }
  if (!f.Has("prompt")) return f.Fail("prompt", "'prompt' is required");
  const Json& prompt = body["prompt"];
  if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    out.prompt = prompt[0].get<std::string>();
  } else if (prompt.is_string()) {
    out.prompt = prompt.get<std::string>();
  } else {
    return f.Fail("prompt", "'prompt' must be a string (one prompt per request)");
  }
  if (out.prompt.empty()) return f.Fail("prompt", "'prompt' must not be empty");
  return true;
}

bool ParseEmbeddingRequest(const std::string& text, EmbeddingRequest& out, RequestError& error) {
  Json body;
  if (!ParseBody(text, body, error)) return false;
  Fields f{body, error};
  if (!f.OnlyKnown({"model", "input", "encoding_format", "user"}, {"dimensions"})) return false;
  if (!f.String("model", out.model, true)) return false;
  if (f.Has("encoding_format")) {
    if (body["encoding_format"] == "base64") {
      out.base64 = true;
    } else if (body["encoding_format"] != "float") {
      return f.Fail("encoding_format", "'encoding_format' must be 'float' or 'base64'");
    }
  }
  if (!f.Has("input")) return f.Fail("input", "'input' is required");
  const Json& input = body["input"];
  if (input.is_string()) {
    out.inputs = {input.get<std::string>()};
  } else if (input.is_array() && !input.empty() && input.size() <= 2048) {
    for (size_t i = 0; i < input.size(); ++i) {
      if (!input[i].is_string()) return f.Fail("input[" + std::to_string(i) + "]", "'input' entries must be strings");
      out.inputs.push_back(input[i].get<std::string>());
    }
  } else {
    return f.Fail("input", "'input' must be a string or an array of 1 to 2048 strings");
  }
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    if (out.inputs[i].empty()) return f.Fail("input[" + std::to_string(i) + "]", "'input' must not contain empty strings");
  }
  return true;
}

std::string ErrorJson(const RequestError& error) {
  Json j = {{"error",
             {{"message", error.message},
              {"type", error.type},
              {"param", error.param.empty() ? Json(nullptr) : Json(error.param)},
              {"code", nullptr}}}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace hetero::serve
