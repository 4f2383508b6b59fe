// Fuzzes chat templates: recognising a Jinja template text (FromJinja), and rendering
// arbitrary conversations (roles, contents, tool calls with arbitrary arguments, tool
// results, tool definitions) with every built-in family and with what FromJinja returned.
// Properties: never crashes; a failure is InvalidArgument with a message; a rendering
// contains every message's content (the families copy contents verbatim).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "hetero/chat.h"

namespace {

// Splits at '\x01' (fields) and '\x02' (messages); a role field of one byte below 4 picks
// system, user, assistant or tool (so '\x00'..'\x03', not the separators).
std::vector<std::vector<std::string>> Records(std::string_view text) {
  std::vector<std::vector<std::string>> records(1, std::vector<std::string>(1));
  for (char c : text) {
    if (c == '\x02') {
      records.emplace_back(1);
    } else if (c == '\x01') {
      records.back().emplace_back();
    } else {
      records.back().back().push_back(c);
    }
  }
  return records;
}

void Check(const hetero::ChatTemplate& chat, const std::vector<hetero::ChatMessage>& messages,
           const std::vector<hetero::ToolDefinition>& tools, bool add_generation_prompt) {
  absl::StatusOr<std::string> prompt = chat.Render(messages, tools, add_generation_prompt);
  if (!prompt.ok()) {
    if (prompt.status().code() != absl::StatusCode::kInvalidArgument || prompt.status().message().empty()) std::abort();
    return;
  }
  for (const hetero::ChatMessage& m : messages) {
    // Llama 3 and Gemma trim contents as their templates do (Python's str.strip: also
    // \x1c-\x1f and Unicode spaces), so only the part between such bytes must be there.
    absl::string_view content = m.content;
    const auto trimmable = [](char c) { return static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x80; };
    while (!content.empty() && trimmable(content.front())) content.remove_prefix(1);
    while (!content.empty() && trimmable(content.back())) content.remove_suffix(1);
    // Llama 3.1 writes tool results as JSON strings (its template's tojson): not verbatim.
    const bool escaped = (m.role == "tool" || m.role == "ipython") && chat.Describe().rfind("llama3", 0) == 0;
    if (m.tool_calls.empty() && !escaped && prompt->find(std::string(content)) == std::string::npos) {
      std::fprintf(stderr, "%s dropped the %s message's content '%s':\n%s\n", chat.Describe().c_str(), m.role.c_str(),
                   m.content.c_str(), prompt->c_str());
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = input.find('\0');
  const std::string_view jinja = input.substr(0, split);
  const std::string_view conversation = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);

  std::vector<hetero::ChatMessage> messages;
  std::vector<hetero::ToolDefinition> tools;
  static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
  for (const std::vector<std::string>& r : Records(conversation)) {
    if (r.size() >= 3 && r[0] == "def") {
      tools.push_back({r[1], r[2], r.size() > 3 ? r[3] : "{}"});
      continue;
    }
    hetero::ChatMessage m;
    m.role = r[0].size() == 1 && static_cast<unsigned char>(r[0][0]) < 4 ? kRoles[static_cast<unsigned char>(r[0][0])]
                                                                          : r[0];
    m.content = r.size() > 1 ? r[1] : "";
    if (m.role == "assistant" && r.size() > 3) m.tool_calls.push_back({"call_0", r[2], r[3]});
    if (m.role == "tool") {
      m.name = r.size() > 2 ? r[2] : "";
      m.tool_call_id = "call_0";
    }
    messages.push_back(std::move(m));
  }
  const bool add_generation_prompt = data[0] & 1;
  for (hetero::ChatFormat format : {hetero::ChatFormat::kChatML, hetero::ChatFormat::kLlama3, hetero::ChatFormat::kMistral,
                                    hetero::ChatFormat::kZephyr, hetero::ChatFormat::kGemma, hetero::ChatFormat::kPhi3,
                                    hetero::ChatFormat::kPhi4, hetero::ChatFormat::kGranite}) {
    Check(hetero::ChatTemplate::ForFormat(format), messages, tools, add_generation_prompt);
  }
  absl::StatusOr<hetero::ChatTemplate> recognised = hetero::ChatTemplate::FromJinja(jinja);
  if (recognised.ok()) Check(*recognised, messages, tools, add_generation_prompt);
  return 0;
}
