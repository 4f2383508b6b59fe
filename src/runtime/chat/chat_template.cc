// Native renderers for the chat template families hetero recognises. Each follows its
// family's published Jinja template as rendered by Hugging Face transformers (trim_blocks,
// lstrip_blocks, `tojson` = Python json.dumps with ensure_ascii=False); the tests compare
// them with jinja2 renderings of the real templates.
#include "hetero/chat.h"

#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hetero/model.h"
#include "src/runtime/chat/python_json.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/tokenizer/utf8.h"

namespace hetero {

struct ChatTemplate::Spec {
  ChatFormat format = ChatFormat::kChatML;
  ChatFormatter custom;               // set for Custom()
  std::string default_system_prompt;  // ChatML: added when the conversation has none
  bool hermes_tools = false;          // ChatML with a <tools> section (Qwen2.5 style)
  bool reasoning = false;             // ChatML with Qwen3's <think> sections
  bool llama31 = false;               // Llama 3.1+: date header and tool format
  bool date_from_clock = false;       // Llama 3.2+: "Today Date" is today (strftime_now)
  bool phi3_system = true;            // Phi-3: the template has a <|system|> turn (Phi-3-mini-4k's has none)
  std::string bos;                    // text the template writes as bos_token
  std::string eos;                    // text the template writes as eos_token
};

namespace {

// Python's str.isspace() set, which Jinja's `trim` (str.strip) removes.
bool IsPythonSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t DecodeAt(absl::string_view s, size_t i, size_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + i);
  switch (n) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default: return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
}

// Jinja's `trim`: strips Python whitespace from both ends.
std::string Trim(absl::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const size_t n = ValidUtf8SequenceLength(s.substr(begin));
    if (n == 0 || !IsPythonSpace(DecodeAt(s, begin, n))) break;
    begin += n;
  }
  size_t end = begin;
  size_t last_content_end = begin;
  while (end < s.size()) {
    size_t n = ValidUtf8SequenceLength(s.substr(end));
    const bool space = n > 0 && IsPythonSpace(DecodeAt(s, end, n));
    if (n == 0) n = 1;
    end += n;
    if (!space) last_content_end = end;
  }
  return std::string(s.substr(begin, last_content_end - begin));
}

// strftime("%d %b %Y") of the local date, as the templates' strftime_now gives it.
std::string TodayDate() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof buf, "%d %b %Y", &local);
  return std::string(buf, n);
}

absl::StatusOr<nlohmann::ordered_json> ToolJson(const ToolDefinition& tool) {
  HETERO_ASSIGN_OR_RETURN(nlohmann::ordered_json parameters,
                          ParseOrderedJson(tool.parameters_json, absl::StrCat("parameters of tool '", tool.name, "'")));
  nlohmann::ordered_json function;
  function["name"] = tool.name;
  function["description"] = tool.description;
  function["parameters"] = std::move(parameters);
  nlohmann::ordered_json wrapped;
  wrapped["type"] = "function";
  wrapped["function"] = std::move(function);
  return wrapped;
}

absl::StatusOr<std::string> ArgumentsJson(const ToolCall& call) {
  HETERO_ASSIGN_OR_RETURN(nlohmann::ordered_json args,
                          ParseOrderedJson(call.arguments_json, absl::StrCat("arguments of the call to '", call.name, "'")));
  return PythonJsonDumps(args);
}

// ---- ChatML -------------------------------------------------------------------------------

void AppendChatMLTurn(absl::string_view role, absl::string_view content, std::string& out) {
  absl::StrAppend(&out, "<|im_start|>", role, "\n", content, "<|im_end|>\n");
}

// Qwen3's assistant turn: its reasoning (given, or split from a content that carries a
// </think>) inside <think> when the turn follows the last user query and is the last
// message or has reasoning; otherwise the content alone.
std::string Qwen3AssistantText(const ChatMessage& m, bool after_last_query, bool last, std::string& content) {
  std::string reasoning = m.reasoning_content;
  content = m.content;
  if (reasoning.empty()) {
    const size_t close = m.content.find("</think>");
    if (close != std::string::npos) {
      // As the template: the text after the last </think>, and before the first one, after
      // the last <think>.
      const size_t last_close = m.content.rfind("</think>");
      content = m.content.substr(last_close + 8);
      while (!content.empty() && content.front() == '\n') content.erase(content.begin());
      std::string before = m.content.substr(0, close);
      while (!before.empty() && before.back() == '\n') before.pop_back();
      const size_t open = before.rfind("<think>");
      reasoning = open == std::string::npos ? before : before.substr(open + 7);
      while (!reasoning.empty() && reasoning.front() == '\n') reasoning.erase(reasoning.begin());
    }
  }
  if (after_last_query && (last || !reasoning.empty())) {
    size_t b = 0, e = reasoning.size();
    while (b < e && reasoning[b] == '\n') ++b;
    while (e > b && reasoning[e - 1] == '\n') --e;
    std::string shown = content;
    while (!shown.empty() && shown.front() == '\n') shown.erase(shown.begin());
    return absl::StrCat("<think>\n", reasoning.substr(b, e - b), "\n</think>\n\n", shown);
  }
  return content;
}

absl::StatusOr<std::string> RenderChatML(const ChatTemplate::Spec& spec, const std::vector<ChatMessage>& messages,
                                         const std::vector<ToolDefinition>& tools, bool add_generation_prompt,
                                         const ChatRenderOptions& options) {
  std::string out;
  const bool first_is_system = !messages.empty() && messages[0].role == "system";
  size_t start = 0;
  if (spec.hermes_tools && !tools.empty()) {
    out += "<|im_start|>system\n";
    // Qwen2.5 always has a system text here (its default); Qwen3 has none without one.
    const std::string& system = first_is_system ? messages[0].content : spec.default_system_prompt;
    if (first_is_system || !system.empty()) absl::StrAppend(&out, system, "\n\n");
    out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ToolDefinition& tool : tools) {
      HETERO_ASSIGN_OR_RETURN(nlohmann::ordered_json json, ToolJson(tool));
      absl::StrAppend(&out, "\n", PythonJsonDumps(json));
    }
    out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
           "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
           "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
    start = first_is_system ? 1 : 0;
  } else if (spec.hermes_tools) {
    // Qwen style: the system turn is written before the loop, default or given.
    if (first_is_system) {
      AppendChatMLTurn("system", messages[0].content, out);
      start = 1;
    } else if (!spec.default_system_prompt.empty()) {
      AppendChatMLTurn("system", spec.default_system_prompt, out);
    }
  } else if (!messages.empty() && !first_is_system && !spec.default_system_prompt.empty()) {
    // SmolLM style: the default system turn is added inside the loop, before the first message.
    AppendChatMLTurn("system", spec.default_system_prompt, out);
  }

  // Qwen3: the last user message that is not a tool response (multi-step tool use).
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    if (messages[i].role == "user" && !(absl::StartsWith(c, "<tool_response>") && absl::EndsWith(c, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = start; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (spec.reasoning && m.role == "assistant") {
      std::string content;
      absl::StrAppend(&out, "<|im_start|>assistant\n",
                      Qwen3AssistantText(m, i > last_query, i + 1 == messages.size(), content));
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0 || !content.empty()) out += "\n";
        HETERO_ASSIGN_OR_RETURN(std::string args, ArgumentsJson(m.tool_calls[k]));
        absl::StrAppend(&out, "<tool_call>\n{\"name\": \"", m.tool_calls[k].name, "\", \"arguments\": ", args,
                        "}\n</tool_call>");
      }
      out += "<|im_end|>\n";
      continue;
    }
    if (!spec.hermes_tools) {
      AppendChatMLTurn(m.role, m.content, out);  // every role, tool calls not written
      continue;
    }
    if (m.role == "user" || m.role == "system" || (m.role == "assistant" && m.tool_calls.empty())) {
      AppendChatMLTurn(m.role, m.content, out);
    } else if (m.role == "assistant") {
      out += "<|im_start|>assistant";
      if (!m.content.empty()) absl::StrAppend(&out, "\n", m.content);
      for (const ToolCall& call : m.tool_calls) {
        HETERO_ASSIGN_OR_RETURN(std::string args, ArgumentsJson(call));
        absl::StrAppend(&out, "\n<tool_call>\n{\"name\": \"", call.name, "\", \"arguments\": ", args, "}\n</tool_call>");
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      absl::StrAppend(&out, "\n<tool_response>\n", m.content, "\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
    // Other roles are not written by this family's template.
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (spec.reasoning && !options.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

// ---- Llama 3 ------------------------------------------------------------------------------

void AppendLlamaTurn(absl::string_view role, absl::string_view content, std::string& out) {
  absl::StrAppend(&out, "<|start_header_id|>", role, "<|end_header_id|>\n\n", content, "<|eot_id|>");
}

absl::StatusOr<std::string> RenderLlama3(const ChatTemplate::Spec& spec, const std::vector<ChatMessage>& messages,
                                         const std::vector<ToolDefinition>& tools, bool add_generation_prompt) {
  std::string out;
  if (!spec.llama31) {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out += spec.bos;
      AppendLlamaTurn(messages[i].role, Trim(messages[i].content), out);
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  // Llama 3.1: a system turn with the date header always comes first; tools go into the
  // first user message.
  out += spec.bos;
  size_t next = 0;
  std::string system_message;
  if (!messages.empty() && messages[0].role == "system") {
    system_message = Trim(messages[0].content);
    next = 1;
  }
  out += "<|start_header_id|>system<|end_header_id|>\n\n";
  if (!tools.empty()) out += "Environment: ipython\n";
  absl::StrAppend(&out, "Cutting Knowledge Date: December 2023\nToday Date: ",
                  spec.date_from_clock ? TodayDate() : std::string("26 Jul 2024"), "\n\n");
  absl::StrAppend(&out, system_message, "<|eot_id|>");
  if (!tools.empty()) {
    if (next >= messages.size()) {
      return absl::InvalidArgumentError(
          "llama3 chat format: tools are written into the first user message, and there is none");
    }
    const std::string first_user = Trim(messages[next].content);
    ++next;
    out += "<|start_header_id|>user<|end_header_id|>\n\n"
           "Given the following functions, please respond with a JSON for a function call with its "
           "proper arguments that best answers the given prompt.\n\n"
           "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name "
           "and its value}.Do not use variables.\n\n";
    for (const ToolDefinition& tool : tools) {
      HETERO_ASSIGN_OR_RETURN(nlohmann::ordered_json json, ToolJson(tool));
      absl::StrAppend(&out, PythonJsonDumps(json, 4), "\n\n");
    }
    absl::StrAppend(&out, first_user, "<|eot_id|>");
  }
  for (size_t i = next; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool" || m.role == "ipython") {
      // The template writes a string result through `tojson` (strings are iterable in Jinja).
      absl::StrAppend(&out, "<|start_header_id|>ipython<|end_header_id|>\n\n",
                      PythonJsonDumps(nlohmann::ordered_json(m.content)), "<|eot_id|>");
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat("llama3 chat format: message ", i, " has ",
                                                       m.tool_calls.size(),
                                                       " tool calls; this family takes one per turn"));
      }
      HETERO_ASSIGN_OR_RETURN(std::string args, ArgumentsJson(m.tool_calls[0]));
      absl::StrAppend(&out, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"", m.tool_calls[0].name,
                      "\", \"parameters\": ", args, "}<|eot_id|>");
    } else {
      AppendLlamaTurn(m.role, Trim(m.content), out);
    }
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// ---- Mistral, Zephyr, Gemma -----------------------------------------------------------------

// Mistral Instruct v0.2 style; a system message is prepended to the next user message.
absl::StatusOr<std::string> RenderMistral(const ChatTemplate::Spec& spec, const std::vector<ChatMessage>& messages) {
  std::string out = spec.bos;
  std::string pending_system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      // Consecutive system messages are joined, not overwritten.
      pending_system = pending_system.empty() ? m.content : absl::StrCat(pending_system, "\n\n", m.content);
    } else if (m.role == "user") {
      const std::string content = pending_system.empty() ? m.content : absl::StrCat(pending_system, "\n\n", m.content);
      pending_system.clear();
      absl::StrAppend(&out, "[INST] ", content, " [/INST]");
    } else if (m.role == "assistant") {
      if (!pending_system.empty()) {
        return absl::InvalidArgumentError("mistral chat format: a system message must be followed by a user message");
      }
      absl::StrAppend(&out, m.content, spec.eos);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("mistral chat format has no '", m.role, "' role"));
    }
  }
  // The template folds a system message into the next user turn; with none, it would be
  // lost without a word.
  if (!pending_system.empty()) {
    return absl::InvalidArgumentError("mistral chat format: a system message must be followed by a user message");
  }
  return out;  // "[/INST]" already prompts the assistant
}

absl::StatusOr<std::string> RenderZephyr(const ChatTemplate::Spec& spec, const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    // The template skips other roles; a message must not vanish without a word.
    if (m.role != "user" && m.role != "system" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("zephyr chat format has no '", m.role, "' role"));
    }
    absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, spec.eos, "\n");
  }
  if (add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

// Gemma (Gemma 3's rules): "model" for the assistant; a first system message becomes a
// prefix ("<system>\n\n", untrimmed) of the first turn; system messages elsewhere are not
// expressible (Gemma 2's template refuses system messages altogether).
absl::StatusOr<std::string> RenderGemma(const ChatTemplate::Spec& spec, const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) {
  std::string out = spec.bos;
  std::string first_prefix;
  size_t start = 0;
  if (!messages.empty() && messages[0].role == "system") {
    if (messages.size() == 1) {
      // The template would drop it: it only prefixes the turn after it.
      return absl::InvalidArgumentError("gemma chat format: a system message needs a turn after it");
    }
    first_prefix = messages[0].content + "\n\n";
    start = 1;
  }
  for (size_t i = start; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      return absl::InvalidArgumentError(
          absl::StrCat("gemma chat format: a system message can only come first (message ", i, ")"));
    }
    const absl::string_view role = m.role == "assistant" ? "model" : absl::string_view(m.role);
    absl::StrAppend(&out, "<start_of_turn>", role, "\n", i == start ? first_prefix : "", Trim(m.content),
                    "<end_of_turn>\n");
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

// Phi-3 / Phi-3.5: "<|role|>\n" turns closed by "<|end|>\n"; a system message with empty
// content is skipped (as the template does); eos ends a prompt without the generation prompt.
absl::StatusOr<std::string> RenderPhi3(const ChatTemplate::Spec& spec, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt) {
  std::string out = spec.bos;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" && !spec.phi3_system) {
      return absl::InvalidArgumentError("phi3 chat format: this template has no system turn (it would drop it)");
    }
    // The template writes only these roles; a message must not vanish without a word.
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("phi3 chat format has no '", m.role, "' role (message ", i, ")"));
    }
    if (m.role == "system" && m.content.empty()) continue;
    absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, "<|end|>\n");
  }
  out += add_generation_prompt ? "<|assistant|>\n" : spec.eos;
  return out;
}

// Phi-4: ChatML's markers with "<|im_sep|>" after the role and no newlines.
absl::StatusOr<std::string> RenderPhi4(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("phi4 chat format has no '", m.role, "' role (message ", i, ")"));
    }
    absl::StrAppend(&out, "<|im_start|>", m.role, "<|im_sep|>", m.content, "<|im_end|>");
  }
  if (add_generation_prompt) out += "<|im_start|>assistant<|im_sep|>";
  return out;
}

// Granite 3.0: "<|start_of_role|>ROLE<|end_of_role|>" turns closed by "<|end_of_text|>\n";
// tools first, each as tojson(indent=4) of its JSON-schema form; a call turn is the
// assistant's "<|tool_call|>" and a JSON list of {"name", "arguments"}. The template knows the
// roles "assistant_tool_call" and "tool_response"; hetero writes its assistant messages
// with tool_calls and its "tool" messages as those (text before the calls stays before the
// marker, where the model writes it).
absl::StatusOr<std::string> RenderGranite(const std::vector<ChatMessage>& messages,
                                          const std::vector<ToolDefinition>& tools, bool add_generation_prompt) {
  std::string out;
  if (!tools.empty()) {
    out += "<|start_of_role|>available_tools<|end_of_role|>\n";
    for (size_t i = 0; i < tools.size(); ++i) {
      HETERO_ASSIGN_OR_RETURN(nlohmann::ordered_json tool, ToolJson(tools[i]));
      absl::StrAppend(&out, i > 0 ? "\n\n" : "", PythonJsonDumps(tool, 4));
    }
    out += "<|end_of_text|>\n";
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      nlohmann::ordered_json calls = nlohmann::ordered_json::array();
      for (const ToolCall& call : m.tool_calls) {
        HETERO_ASSIGN_OR_RETURN(
            nlohmann::ordered_json args,
            ParseOrderedJson(call.arguments_json, absl::StrCat("arguments of the call to '", call.name, "'")));
        nlohmann::ordered_json one;
        one["name"] = call.name;
        one["arguments"] = std::move(args);
        calls.push_back(std::move(one));
      }
      absl::StrAppend(&out, "<|start_of_role|>assistant<|end_of_role|>", m.content, "<|tool_call|>",
                      PythonJsonDumps(calls), "<|end_of_text|>\n");
    } else if (m.role == "assistant_tool_call") {
      absl::StrAppend(&out, "<|start_of_role|>assistant<|end_of_role|><|tool_call|>", m.content, "<|end_of_text|>\n");
    } else if (m.role == "tool" || m.role == "tool_response") {
      absl::StrAppend(&out, "<|start_of_role|>tool_response<|end_of_role|>", m.content, "<|end_of_text|>\n");
    } else if (m.role == "system" || m.role == "user" || m.role == "assistant") {
      absl::StrAppend(&out, "<|start_of_role|>", m.role, "<|end_of_role|>", m.content, "<|end_of_text|>\n");
    } else {
      // The template skips other roles; a message must not vanish without a word.
      return absl::InvalidArgumentError(absl::StrCat("granite chat format has no '", m.role, "' role (message ", i, ")"));
    }
  }
  // The template opens the reply inside its loop: never after an empty conversation.
  if (add_generation_prompt && !messages.empty()) out += "<|start_of_role|>assistant<|end_of_role|>";
  return out;
}

// The default system prompt a ChatML template writes as a literal system turn.
std::string FindDefaultSystemPrompt(absl::string_view jinja) {
  constexpr absl::string_view kOpen = "<|im_start|>system";
  size_t pos = 0;
  while ((pos = jinja.find(kOpen, pos)) != absl::string_view::npos) {
    pos += kOpen.size();
    absl::string_view rest = jinja.substr(pos);
    if (absl::StartsWith(rest, "\\n")) {
      rest.remove_prefix(2);
    } else if (absl::StartsWith(rest, "\n")) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    const size_t end = rest.find("<|im_end|>");
    if (end == absl::string_view::npos) continue;
    const absl::string_view text = rest.substr(0, end);
    // A literal, not an expression such as `' + message['content'] + '`.
    if (text.empty() || text.find_first_of("'\"{}+") != absl::string_view::npos) continue;
    return std::string(text);
  }
  return "";
}

}  // namespace

std::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatML: return "chatml";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kMistral: return "mistral";
    case ChatFormat::kZephyr: return "zephyr";
    case ChatFormat::kGemma: return "gemma";
    case ChatFormat::kPhi3: return "phi3";
    case ChatFormat::kPhi4: return "phi4";
    case ChatFormat::kGranite: return "granite";
  }
  return "unknown";
}

absl::StatusOr<ChatFormat> ParseChatFormat(std::string_view name) {
  for (ChatFormat f : {ChatFormat::kChatML, ChatFormat::kLlama3, ChatFormat::kMistral, ChatFormat::kZephyr,
                       ChatFormat::kGemma, ChatFormat::kPhi3, ChatFormat::kPhi4, ChatFormat::kGranite}) {
    if (ChatFormatName(f) == name) return f;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown chat format '", std::string(name),
                                                 "' (known: chatml, llama3, mistral, zephyr, gemma, phi3, phi4, granite)"));
}

ChatTemplate ChatTemplate::ForFormat(ChatFormat format) {
  auto spec = std::make_shared<Spec>();
  spec->format = format;
  switch (format) {
    case ChatFormat::kChatML: break;
    case ChatFormat::kLlama3:
      spec->llama31 = true;
      spec->bos = "<|begin_of_text|>";
      break;
    case ChatFormat::kMistral:
      spec->bos = "<s>";
      spec->eos = "</s>";
      break;
    case ChatFormat::kZephyr: spec->eos = "</s>"; break;
    case ChatFormat::kGemma: spec->bos = "<bos>"; break;
    case ChatFormat::kPhi3: spec->eos = "<|endoftext|>"; break;
    case ChatFormat::kPhi4: break;
    case ChatFormat::kGranite: spec->eos = "<|end_of_text|>"; break;
  }
  return ChatTemplate(std::move(spec));
}

ChatTemplate ChatTemplate::Custom(ChatFormatter formatter) {
  auto spec = std::make_shared<Spec>();
  spec->custom = std::move(formatter);
  return ChatTemplate(std::move(spec));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromJinja(std::string_view jinja_text) {
  const absl::string_view jinja(jinja_text.data(), jinja_text.size());
  std::optional<ChatFormat> format;
  if (absl::StrContains(jinja, "<|im_sep|>")) {
    format = ChatFormat::kPhi4;  // ChatML's markers, another separator
  } else if (absl::StrContains(jinja, "<|start_of_role|>")) {
    // Granite 3.0's template; 3.1 and later add a dated default system prompt, documents
    // and "controls", which this renderer does not write.
    if (!absl::StrContains(jinja, "assistant_tool_call") || absl::StrContains(jinja, "Knowledge Cutoff") ||
        absl::StrContains(jinja, "documents") || absl::StrContains(jinja, "controls")) {
      return absl::UnimplementedError(
          "Granite chat template other than Granite 3.0's (3.1+ adds a dated default system prompt, documents "
          "and controls) is not supported; use ChatTemplate::ForFormat(ChatFormat::kGranite) or "
          "ChatTemplate::Custom");
    }
    format = ChatFormat::kGranite;
  } else if (absl::StrContains(jinja, "<|user|>") && absl::StrContains(jinja, "<|assistant|>") &&
             absl::StrContains(jinja, "<|end|>")) {
    // Phi-3 and 3.5 write each role's marker literally; Phi-4-mini builds it from the role
    // and adds a tool section, which this renderer does not know.
    if (absl::StrContains(jinja, "<|tool|>") || absl::StrContains(jinja, "'<|' + message")) {
      return absl::UnimplementedError(
          "Phi chat template with a tool section or role markers built from the role (Phi-4-mini style) is not "
          "supported; use ChatTemplate::ForFormat(ChatFormat::kPhi3) or ChatTemplate::Custom");
    }
    format = ChatFormat::kPhi3;
  } else if (absl::StrContains(jinja, "<|im_start|>")) {
    format = ChatFormat::kChatML;
  } else if (absl::StrContains(jinja, "<|start_header_id|>")) {
    format = ChatFormat::kLlama3;
  } else if (absl::StrContains(jinja, "<start_of_turn>")) {
    format = ChatFormat::kGemma;
  } else if (absl::StrContains(jinja, "[INST]")) {
    format = ChatFormat::kMistral;
  } else if (absl::StrContains(jinja, "<|user|>") && absl::StrContains(jinja, "<|assistant|>") &&
             !absl::StrContains(jinja, "<|end|>")) {
    format = ChatFormat::kZephyr;
  }
  if (!format.has_value()) {
    std::string head(jinja.substr(0, 80));
    for (char& c : head) {
      if (c == '\n') c = ' ';
    }
    return absl::UnimplementedError(absl::StrCat(
        "chat template not recognised (it begins \"", PrintableName(head),
        "\"); choose a family with ChatTemplate::ForFormat (chatml, llama3, mistral, zephyr, gemma, phi3, phi4, granite) "
        "or supply a formatter with ChatTemplate::Custom"));
  }
  ChatTemplate t = ForFormat(*format);
  auto spec = std::make_shared<Spec>(*t.spec_);
  if (*format == ChatFormat::kChatML) {
    // Variants whose prompts this renderer would get wrong are refused, not guessed.
    if (absl::StrContains(jinja, "<think>")) {
      // Qwen3's form: reasoning kept for the turns after the last query, enable_thinking.
      if (!absl::StrContains(jinja, "reasoning_content") || !absl::StrContains(jinja, "last_query_index") ||
          !absl::StrContains(jinja, "enable_thinking")) {
        return absl::UnimplementedError(
            "ChatML template with <think> reasoning sections other than Qwen3's (e.g. DeepSeek-R1 style) is not "
            "supported; use ChatTemplate::ForFormat(ChatFormat::kChatML) or ChatTemplate::Custom");
      }
      spec->reasoning = true;
    }
    spec->default_system_prompt = FindDefaultSystemPrompt(jinja);
    spec->hermes_tools = absl::StrContains(jinja, "<tools>");
    if (spec->hermes_tools &&
        !absl::StrContains(jinja, "You may call one or more functions to assist with the user query.")) {
      return absl::UnimplementedError(
          "ChatML template with a tool section other than Qwen2.5's is not supported; "
          "use ChatTemplate::Custom to render it");
    }
  } else if (*format == ChatFormat::kLlama3) {
    spec->llama31 = absl::StrContains(jinja, "Cutting Knowledge Date") || absl::StrContains(jinja, "ipython");
    spec->date_from_clock = absl::StrContains(jinja, "strftime_now");
  } else if (*format == ChatFormat::kPhi3) {
    spec->phi3_system = absl::StrContains(jinja, "<|system|>");
    // Phi-3-mini-4k's template starts with bos_token; Phi-3.5's leaves BOS to the tokenizer.
    if (absl::StrContains(jinja, "bos_token")) spec->bos = "<s>";
  }
  return ChatTemplate(std::move(spec));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromModel(const Model& model) {
  const GgufFile& file = *model.impl().gguf;
  const GgufValue* value = file.FindValue("tokenizer.chat_template");
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "model '", model.path(), "' has no tokenizer.chat_template; choose a family with "
        "ChatTemplate::ForFormat or supply a formatter with ChatTemplate::Custom"));
  }
  HETERO_ASSIGN_OR_RETURN(absl::string_view jinja, file.GetString("tokenizer.chat_template"));
  HETERO_ASSIGN_OR_RETURN(ChatTemplate t, FromJinja(std::string_view(jinja.data(), jinja.size())));
  // The model's own BOS/EOS text, where the family writes them.
  auto spec = std::make_shared<Spec>(*t.spec_);
  const GgufValue* tokens = file.FindValue("tokenizer.ggml.tokens");
  auto token_text = [&](const char* key, std::string& out) {
    const GgufValue* id = file.FindValue(key);
    if (tokens == nullptr || id == nullptr || out.empty()) return;
    absl::StatusOr<const GgufArray*> list = tokens->ToArray();
    absl::StatusOr<uint64_t> index = id->ToUint64();
    if (list.ok() && index.ok() && (*list)->element_type == GgufValueType::kString && *index < (*list)->size) {
      out = std::string((*list)->strings[*index]);
    }
  };
  token_text("tokenizer.ggml.bos_token_id", spec->bos);
  token_text("tokenizer.ggml.eos_token_id", spec->eos);
  return ChatTemplate(std::move(spec));
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 const std::vector<ToolDefinition>& tools,
                                                 bool add_generation_prompt, const ChatRenderOptions& options) const {
  if (spec_->custom) return spec_->custom(messages, tools, add_generation_prompt);
  switch (spec_->format) {
    case ChatFormat::kChatML: return RenderChatML(*spec_, messages, tools, add_generation_prompt, options);
    case ChatFormat::kLlama3: return RenderLlama3(*spec_, messages, tools, add_generation_prompt);
    case ChatFormat::kMistral: return RenderMistral(*spec_, messages);
    case ChatFormat::kZephyr: return RenderZephyr(*spec_, messages, add_generation_prompt);
    case ChatFormat::kGemma: return RenderGemma(*spec_, messages, add_generation_prompt);
    case ChatFormat::kPhi3: return RenderPhi3(*spec_, messages, add_generation_prompt);
    case ChatFormat::kPhi4: return RenderPhi4(messages, add_generation_prompt);
    case ChatFormat::kGranite: return RenderGranite(messages, tools, add_generation_prompt);
  }
  return absl::InternalError("unknown chat format");
}

std::string ChatTemplate::Describe() const {
  if (spec_->custom) return "custom";
  std::string d(ChatFormatName(spec_->format));
  if (spec_->hermes_tools) d += " (hermes tools)";
  if (spec_->reasoning) d += " (qwen3 reasoning)";
  if (spec_->format == ChatFormat::kLlama3) d += spec_->llama31 ? " (3.1+)" : " (3.0)";
  return d;
}

bool ChatTemplate::supports_reasoning() const { return !spec_->custom && spec_->reasoning; }

SplitReply SplitReasoning(std::string_view reply) {
  SplitReply out;
  size_t i = 0;
  while (i < reply.size() && (reply[i] == ' ' || reply[i] == '\n')) ++i;
  if (reply.substr(i, 7) != "<think>") {
    out.answer = std::string(reply);
    return out;
  }
  const size_t close = reply.find("</think>", i + 7);
  std::string_view reasoning = reply.substr(i + 7, close == std::string_view::npos ? std::string_view::npos : close - i - 7);
  while (!reasoning.empty() && reasoning.front() == '\n') reasoning.remove_prefix(1);
  while (!reasoning.empty() && reasoning.back() == '\n') reasoning.remove_suffix(1);
  out.reasoning = std::string(reasoning);
  if (close != std::string_view::npos) {
    std::string_view answer = reply.substr(close + 8);
    while (!answer.empty() && answer.front() == '\n') answer.remove_prefix(1);
    out.answer = std::string(answer);
  }
  return out;
}

bool ChatTemplate::supports_tools() const {
  return !spec_->custom && (spec_->hermes_tools || (spec_->format == ChatFormat::kLlama3 && spec_->llama31) ||
                            spec_->format == ChatFormat::kGranite);
}

const std::string& ChatTemplate::default_system_prompt() const { return spec_->default_system_prompt; }

}  // namespace hetero
