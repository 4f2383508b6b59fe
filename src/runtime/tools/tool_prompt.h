// How tools reach the model: the format a chat template implies, and, where the template
// has no tool section (or the format is generic), the system prompt that describes the
// tools and the reply format, with tool results shown as a user turn.
#ifndef HETERO_RUNTIME_TOOLS_TOOL_PROMPT_H_
#define HETERO_RUNTIME_TOOLS_TOOL_PROMPT_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "hetero/chat.h"
#include "hetero/tools.h"

namespace hetero::internal {

// kAuto becomes Hermes (ChatML with a tool section), Llama3 (Llama 3.1+) or Generic.
ToolCallFormat ResolveToolFormat(const ChatTemplate& chat, ToolCallFormat requested);

// Whether the template itself writes the tool definitions for this format.
bool TemplateDescribesTools(const ChatTemplate& chat, ToolCallFormat format);

// An assistant turn exactly as the model generated it under a tool format, by the turn's
// index in the conversation. The conversation itself keeps only the turn's text and calls
// (no reply envelope), so a run in another form never sees the envelope, while a later run
// in the same format is shown these bytes again and reuses their KV.
struct GeneratedTurn {
  ToolCallFormat format = ToolCallFormat::kGeneric;
  std::string text;
};
using GeneratedTurns = std::map<size_t, GeneratedTurn>;

// The conversation for a run with tools in `format`. Where the template writes calls
// (`template_writes_calls`), turns keep their calls for it and a turn without calls
// generated in `format` is shown as generated. Otherwise every turn generated in `format` is
// shown as generated, and for the generic format every other assistant turn in its envelope
// ({"tool_calls": [...]} or {"response": "..."}).
std::vector<ChatMessage> ConversationInToolFormat(const std::vector<ChatMessage>& messages,
                                                  const GeneratedTurns& generated, ToolCallFormat format,
                                                  bool template_writes_calls);

// The conversation for a run without tools. Where the template cannot write tool calls and
// results, earlier tool exchanges become plain text: a call as `name(arguments)` in its
// assistant turn, consecutive results as one user turn. A conversation without tool turns
// is returned unchanged.
std::vector<ChatMessage> ConversationWithoutTools(const std::vector<ChatMessage>& messages, const ChatTemplate& chat);

// The conversation as the model should see it when the template does not describe the
// tools: a system turn explaining the tools and the reply format (after the template's
// default system prompt, or the caller's), and tool results as user turns.
std::vector<ChatMessage> MessagesWithToolPrompt(const std::vector<ChatMessage>& messages, const ToolRegistry& tools,
                                                ToolCallFormat format, const ChatTemplate& chat);

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_TOOL_PROMPT_H_
