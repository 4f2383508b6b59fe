#include "src/runtime/tools/tool_prompt.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/runtime/tools/json_schema.h"

namespace hetero::internal {
namespace {

// Text a model generated may end inside a UTF-8 sequence: shown again, never a throw.
constexpr auto kReplaceBadUtf8 = nlohmann::ordered_json::error_handler_t::replace;

// The schema as compact JSON (it was validated at registration, so it parses).
std::string CompactSchema(const std::string& schema) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(schema, nullptr, false);
  return j.is_discarded() ? schema : j.dump();
}

// A value of the schema with placeholders ("..." for strings), to show the reply format.
nlohmann::ordered_json ExampleValue(const SchemaNode& s) {
  if (!s.allowed.empty()) return nlohmann::ordered_json::parse(s.allowed[0].dump());
  switch (s.type) {
    case SchemaType::kObject: {
      nlohmann::ordered_json o = nlohmann::ordered_json::object();
      for (const auto& p : s.properties) {
        if (p.required) o[p.key] = ExampleValue(*p.schema);
      }
      return o;
    }
    case SchemaType::kArray: {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      if (s.min_items > 0) a.push_back(ExampleValue(*s.items));
      return a;
    }
    case SchemaType::kString: return "...";
    case SchemaType::kNumber:
    case SchemaType::kInteger: return s.minimum.value_or(1);
    case SchemaType::kBoolean: return true;
    case SchemaType::kNull: return nullptr;
  }
  return nullptr;
}

// The run of tool results starting at messages[i] as one user turn's text ("Tool results:"
// and a line per result); `i` is left on the run's last result.
std::string ToolResultsText(const std::vector<ChatMessage>& messages, size_t& i) {
  std::string text = "Tool results:\n";
  for (; i < messages.size() && messages[i].role == "tool"; ++i) {
    absl::StrAppend(&text, messages[i].name.empty() ? "tool" : messages[i].name, ": ", messages[i].content, "\n");
  }
  --i;
  return text;
}

std::string ToolList(const ToolRegistry& tools) {
  std::string out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Tool& t = tools.tool(i);
    absl::StrAppend(&out, "- ", t.name, ": ", t.description, " Arguments: ", CompactSchema(t.parameters_json), "\n");
  }
  return out;
}

std::string Instructions(const ToolRegistry& tools, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return absl::StrCat("You can call these tools:\n", ToolList(tools),
                          "To call a tool, write <tool_call>{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}"
                          "</tool_call>. Tool results come back in the next turn; then answer the user.");
    case ToolCallFormat::kLlama3:
      return absl::StrCat("You can call these tools:\n", ToolList(tools),
                          "To call a tool, reply with only {\"name\": \"<tool name>\", \"parameters\": {<arguments>}}. "
                          "Tool results come back in the next turn; then answer the user.");
    case ToolCallFormat::kGranite:
      return absl::StrCat("You can call these tools:\n", ToolList(tools),
                          "To call tools, reply with <|tool_call|>[{\"name\": \"<tool name>\", \"arguments\": "
                          "{<arguments>}}]. Tool results come back in the next turn; then answer the user.");
    default:
      return absl::StrCat(
          "You can call tools to find answers. Always reply with exactly one JSON object.\n"
          "To call tools: {\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}]}\n"
          "To answer the user: {\"response\": \"<your answer>\"}\n"
          "Tools:\n",
          ToolList(tools), "For example: {\"tool_calls\": [{\"name\": \"", tools.size() > 0 ? tools.tool(0).name : "",
          "\", \"arguments\": ", tools.size() > 0 ? ExampleValue(tools.schema(0).root()).dump() : "{}", "}]}\n",
          "Use the tool whose description fits the question; when its results are back, answer with them.");
  }
}

}  // namespace

namespace {

// The tool-call format a template that describes tools writes its calls in.
ToolCallFormat TemplateToolFormat(const ChatTemplate& chat) {
  const std::string family = chat.Describe();
  if (absl::StartsWith(family, "llama3")) return ToolCallFormat::kLlama3;
  if (absl::StartsWith(family, "granite")) return ToolCallFormat::kGranite;
  return ToolCallFormat::kHermes;
}

}  // namespace

ToolCallFormat ResolveToolFormat(const ChatTemplate& chat, ToolCallFormat requested) {
  if (requested != ToolCallFormat::kAuto) return requested;
  if (!chat.supports_tools()) return ToolCallFormat::kGeneric;
  return TemplateToolFormat(chat);
}

bool TemplateDescribesTools(const ChatTemplate& chat, ToolCallFormat format) {
  if (format == ToolCallFormat::kGeneric || !chat.supports_tools()) return false;
  return TemplateToolFormat(chat) == format;
}

std::vector<ChatMessage> MessagesWithToolPrompt(const std::vector<ChatMessage>& messages, const ToolRegistry& tools,
                                                ToolCallFormat format, const ChatTemplate& chat) {
  std::vector<ChatMessage> out;
  const std::string instructions = Instructions(tools, format);
  size_t i = 0;
  if (!messages.empty() && messages[0].role == "system") {
    out.push_back({"system", absl::StrCat(messages[0].content, "\n\n", instructions)});
    i = 1;
  } else {
    const std::string& base = chat.default_system_prompt();
    out.push_back({"system", base.empty() ? instructions : absl::StrCat(base, "\n\n", instructions)});
  }
  std::string question;  // the user's latest request, repeated with tool results
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") question = m.content;
    if (m.role != "tool") {
      out.push_back(m);
      continue;
    }
    // Consecutive tool results become one user turn.
    std::string text = ToolResultsText(messages, i);
    // Small models copy placeholders, so the reminder names the question, not a format.
    absl::StrAppend(&text, "\nUse these results to answer the question: ", question);
    out.push_back({"user", text});
  }
  return out;
}

std::vector<ChatMessage> ConversationInToolFormat(const std::vector<ChatMessage>& messages,
                                                  const GeneratedTurns& generated, ToolCallFormat format,
                                                  bool template_writes_calls) {
  std::vector<ChatMessage> out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    ChatMessage& m = out[i];
    if (m.role != "assistant") continue;
    const auto it = generated.find(i);
    const bool as_generated = it != generated.end() && it->second.format == format;
    if (template_writes_calls) {
      // The template writes calls in its own syntax; a turn without calls is its text.
      if (as_generated && m.tool_calls.empty()) {
        // The reply as generated carries its own <think> block: the renderer splits it as
        // the template does (a kept reasoning_content would show it twice).
        m.content = it->second.text;
        m.reasoning_content.clear();
      }
      continue;
    }
    if (as_generated) {
      m.content = it->second.text;
      m.reasoning_content.clear();
    } else if (format != ToolCallFormat::kGeneric) {
      continue;  // no envelope to write: text and calls as they are
    } else if (!m.tool_calls.empty()) {
      nlohmann::ordered_json calls = nlohmann::ordered_json::array();
      for (const ToolCall& call : m.tool_calls) {
        nlohmann::ordered_json arguments = nlohmann::ordered_json::parse(call.arguments_json, nullptr, false);
        if (arguments.is_discarded()) arguments = nlohmann::ordered_json::object();
        calls.push_back({{"name", call.name}, {"arguments", std::move(arguments)}});
      }
      m.content = nlohmann::ordered_json{{"tool_calls", std::move(calls)}}.dump(-1, ' ', false, kReplaceBadUtf8);
    } else {
      m.content = nlohmann::ordered_json{{"response", m.content}}.dump(-1, ' ', false, kReplaceBadUtf8);
    }
    m.tool_calls.clear();  // the envelope holds them
  }
  return out;
}

std::vector<ChatMessage> ConversationWithoutTools(const std::vector<ChatMessage>& messages, const ChatTemplate& chat) {
  const bool has_tool_turns = std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
    return m.role == "tool" || !m.tool_calls.empty();
  });
  if (!has_tool_turns || chat.supports_tools()) return messages;
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      out.push_back({"user", ToolResultsText(messages, i)});
      continue;
    }
    ChatMessage shown{m.role, m.content};
    for (const ToolCall& call : m.tool_calls) {
      absl::StrAppend(&shown.content, shown.content.empty() ? "" : "\n", call.name, "(", call.arguments_json, ")");
    }
    out.push_back(std::move(shown));
  }
  return out;
}

}  // namespace hetero::internal
