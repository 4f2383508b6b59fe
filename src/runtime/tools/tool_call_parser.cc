// ParseToolCalls: tool calls out of model replies, in the Hermes, Llama 3.1, Granite and
// generic formats (hetero/tools.h). Malformed markup never fails the parse: it becomes a call
// carrying an error (so the model can be told what was wrong) or plain text.
#include <string>

#include "absl/strings/str_cat.h"
#include "hetero/tools.h"
#include "src/runtime/tools/tool_call_markers.h"
#include "nlohmann/json.hpp"

namespace hetero {
namespace {

using nlohmann::json;

constexpr size_t kMaxRawBytes = 4096;  // kept per call, for reports

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string Clip(std::string_view s) {
  return std::string(s.size() <= kMaxRawBytes ? s : s.substr(0, kMaxRawBytes));
}

// Parses JSON, returning the parser's message (with its byte position) on failure.
bool ParseJson(std::string_view text, json& out, std::string& error) {
  try {
    out = json::parse(text);
    return true;
  } catch (const json::exception& e) {
    error = std::string("invalid JSON: ") + e.what();
    return false;
  }
}

// One call object: {"name": string, "arguments"|"parameters": object (or a string holding
// one, as some models write)}.
ParsedToolCall CallFromJson(const json& v, std::string_view raw) {
  ParsedToolCall call;
  call.raw = Clip(raw);
  if (!v.is_object()) {
    call.error = "a tool call must be a JSON object with \"name\" and \"arguments\"";
    return call;
  }
  const auto name = v.find("name");
  if (name == v.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    call.error = "the tool call has no \"name\" string";
    return call;
  }
  call.name = name->get<std::string>();
  auto args = v.find("arguments");
  if (args == v.end()) args = v.find("parameters");
  if (args == v.end()) {
    call.arguments_json = "{}";
    return call;
  }
  json value = *args;
  if (value.is_string()) {
    json inner;
    std::string error;
    if (!ParseJson(value.get_ref<const std::string&>(), inner, error)) {
      call.error = absl::StrCat("\"arguments\" is a string that is not JSON (", error, ")");
      return call;
    }
    value = std::move(inner);
  }
  if (!value.is_object()) {
    call.error = "\"arguments\" must be a JSON object";
    return call;
  }
  call.arguments_json = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return call;
}

void AddCalls(std::string_view payload, std::vector<ParsedToolCall>& calls) {
  const std::string_view trimmed = Trim(payload);
  json v;
  std::string error;
  if (!ParseJson(trimmed, v, error)) {
    ParsedToolCall call;
    call.raw = Clip(trimmed);
    call.error = error;
    calls.push_back(std::move(call));
    return;
  }
  if (v.is_array()) {
    if (v.empty()) {
      ParsedToolCall call;
      call.raw = Clip(trimmed);
      call.error = "an empty list of tool calls";
      calls.push_back(std::move(call));
    }
    for (const json& item : v) calls.push_back(CallFromJson(item, item.dump(-1, ' ', false, json::error_handler_t::replace)));
    return;
  }
  calls.push_back(CallFromJson(v, trimmed));
}

ParsedReply ParseHermes(std::string_view reply) {
  ParsedReply out;
  size_t at = 0;
  while (at < reply.size()) {
    const size_t open = reply.find(internal::kHermesOpenTag, at);
    if (open == std::string_view::npos) {
      out.text += reply.substr(at);
      break;
    }
    out.text += reply.substr(at, open - at);
    const size_t body = open + internal::kHermesOpenTag.size();
    const size_t close = reply.find(internal::kHermesCloseTag, body);
    if (close == std::string_view::npos) {
      // Cut off (max tokens) or never closed: parse what there is, say it was unterminated.
      std::vector<ParsedToolCall> calls;
      AddCalls(reply.substr(body), calls);
      for (auto& c : calls) {
        if (c.error.empty()) continue;
        c.error = absl::StrCat("unterminated <tool_call> (", c.error, ")");
      }
      for (auto& c : calls) out.calls.push_back(std::move(c));
      break;
    }
    AddCalls(reply.substr(body, close - body), out.calls);
    at = close + internal::kHermesCloseTag.size();
  }
  out.text = std::string(Trim(out.text));
  return out;
}

ParsedReply ParseLlama3(std::string_view reply) {
  ParsedReply out;
  std::string_view r = Trim(reply);
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  if (r.substr(0, kPythonTag.size()) == kPythonTag) r = Trim(r.substr(kPythonTag.size()));
  if (r.empty() || r[0] != '{') {
    out.text = std::string(r);
    return out;
  }
  AddCalls(r, out.calls);
  return out;
}

// Text, then "<|tool_call|>" and a JSON list of calls (a lone object is taken too).
ParsedReply ParseGranite(std::string_view reply) {
  ParsedReply out;
  const size_t marker = reply.find(internal::kGraniteCallMarker);
  if (marker == std::string_view::npos) {
    out.text = std::string(Trim(reply));
    return out;
  }
  out.text = std::string(Trim(reply.substr(0, marker)));
  AddCalls(reply.substr(marker + internal::kGraniteCallMarker.size()), out.calls);
  return out;
}

ParsedReply ParseGeneric(std::string_view reply) {
  ParsedReply out;
  const std::string_view r = Trim(reply);
  json v;
  std::string error;
  if (r.empty() || r[0] != '{' || !ParseJson(r, v, error) || !v.is_object()) {
    if (!r.empty() && r[0] == '{') {
      // It meant to be JSON: a broken call, not an answer.
      ParsedToolCall call;
      call.raw = Clip(r);
      call.error = error.empty() ? "the reply is not a JSON object" : error;
      out.calls.push_back(std::move(call));
      return out;
    }
    out.text = std::string(r);  // a plain-text answer
    return out;
  }
  if (const auto calls = v.find("tool_calls"); calls != v.end()) {
    if (!calls->is_array() || calls->empty()) {
      ParsedToolCall call;
      call.raw = Clip(r);
      call.error = "\"tool_calls\" must be a non-empty list";
      out.calls.push_back(std::move(call));
      return out;
    }
    for (const json& item : *calls) {
      out.calls.push_back(CallFromJson(item, item.dump(-1, ' ', false, json::error_handler_t::replace)));
    }
    return out;
  }
  if (const auto response = v.find("response"); response != v.end()) {
    out.text = response->is_string() ? response->get<std::string>() : response->dump();
    return out;
  }
  if (v.contains("name")) {  // a lone call object
    out.calls.push_back(CallFromJson(v, r));
    return out;
  }
  out.text = std::string(r);
  return out;
}

}  // namespace

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kAuto: return "auto";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kGeneric: return "generic";
    case ToolCallFormat::kGranite: return "granite";
  }
  return "?";
}

ParsedReply ParseToolCalls(std::string_view reply, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return ParseHermes(reply);
    case ToolCallFormat::kLlama3: return ParseLlama3(reply);
    case ToolCallFormat::kGeneric: return ParseGeneric(reply);
    case ToolCallFormat::kGranite: return ParseGranite(reply);
    case ToolCallFormat::kAuto: {
      // Without a template to decide: Hermes tags if present, else generic JSON.
      if (reply.find(internal::kHermesOpenTag) != std::string_view::npos) return ParseHermes(reply);
      return ParseGeneric(reply);
    }
  }
  return ParseGeneric(reply);
}

}  // namespace hetero
