// How tools reach the model: the format a chat template implies, and, where the template
// has no tool section (or the format is generic), the system prompt that describes the
// tools and the reply format, with tool results shown as a user turn.
#ifndef HETERO_RUNTIME_TOOLS_TOOL_PROMPT_H_
#define HETERO_RUNTIME_TOOLS_TOOL_PROMPT_H_

#include <vector>

#include "hetero/chat.h"
#include "hetero/tools.h"

namespace hetero::internal {

// kAuto becomes Hermes (ChatML with a tool section), Llama3 (Llama 3.1+) or Generic.
ToolCallFormat ResolveToolFormat(const ChatTemplate& chat, ToolCallFormat requested);

// Whether the template itself writes the tool definitions for this format.
bool TemplateDescribesTools(const ChatTemplate& chat, ToolCallFormat format);

// The conversation as the model should see it when the template does not describe the
// tools: a system turn explaining the tools and the reply format (after the template's
// default system prompt, or the caller's), and tool results as user turns.
std::vector<ChatMessage> MessagesWithToolPrompt(const std::vector<ChatMessage>& messages, const ToolRegistry& tools,
                                                ToolCallFormat format, const ChatTemplate& chat);

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_TOOL_PROMPT_H_
