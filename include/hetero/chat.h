// Chat templates: a conversation (system, user, assistant and tool messages, plus tool
// definitions) rendered into the prompt text a model was trained on. The GGUF file's Jinja
// template (tokenizer.chat_template) is recognised by family and rendered natively, with
// the family's variants (default system prompt, tool sections) read from the template:
//   ChatML  (<|im_start|>; SmolLM2, Qwen2/2.5 with Hermes-style <tools>, Qwen3 with <think>
//            reasoning as well)
//   Llama 3 (<|start_header_id|>; 3.0, and 3.1+ with its tool format)
//   Mistral ([INST])   Zephyr (<|user|>)   Gemma (<start_of_turn>)
// Render the prompt, then tokenize it with parse_special = true and add_bos = false: the
// text already carries BOS where the family's template writes it.
#ifndef HETERO_CHAT_H_
#define HETERO_CHAT_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/export.h"

namespace hetero {

class Model;

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments_json;  // a JSON object
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool" (others pass through)
  std::string content;
  // Defaulted, so that {"user", text} initializes a plain message without warnings.
  std::vector<ToolCall> tool_calls{};  // assistant turns that call tools
  std::string tool_call_id{};          // tool results: the call answered
  std::string name{};                  // tool results: the tool's name
  // Assistant turns of reasoning models (Qwen3): the reasoning before the answer, rendered
  // as the template does (inside <think> for turns after the last user message, dropped
  // before it).
  std::string reasoning_content{};
};

struct ChatRenderOptions {
  // Reasoning templates (Qwen3): false ends the generation prompt with an empty <think>
  // block, as enable_thinking=False does. Other templates ignore it.
  bool enable_thinking = true;
};

// A reply's reasoning (the text inside a leading <think>...</think>) and its answer (what
// follows, leading newlines dropped); no leading <think> block: all of it is the answer.
// An unclosed block is all reasoning (generation stopped while thinking).
struct SplitReply {
  std::string reasoning;
  std::string answer;
};
HETERO_EXPORT SplitReply SplitReasoning(std::string_view reply);

struct ToolDefinition {
  std::string name;
  std::string description;
  std::string parameters_json;  // a JSON schema object
};

enum class ChatFormat { kChatML, kLlama3, kMistral, kZephyr, kGemma, kPhi3, kPhi4, kGranite };

// "chatml", "llama3", "mistral", "zephyr", "gemma", "phi3", "phi4", "granite".
HETERO_EXPORT std::string_view ChatFormatName(ChatFormat format);
HETERO_EXPORT absl::StatusOr<ChatFormat> ParseChatFormat(std::string_view name);

// A caller-supplied formatter, for templates hetero does not know.
using ChatFormatter = std::function<absl::StatusOr<std::string>(
    const std::vector<ChatMessage>& messages, const std::vector<ToolDefinition>& tools,
    bool add_generation_prompt)>;

class HETERO_EXPORT ChatTemplate {
 public:
  // Recognises the model's tokenizer.chat_template. A missing or unrecognised template is
  // an error that suggests ForFormat() or Custom().
  static absl::StatusOr<ChatTemplate> FromModel(const Model& model);
  // Recognises a Jinja template text.
  static absl::StatusOr<ChatTemplate> FromJinja(std::string_view jinja);
  // A family's standard form (ChatML without default system prompt or tools section;
  // Llama 3.1 with tools).
  static ChatTemplate ForFormat(ChatFormat format);
  // Renders with the caller's own formatter.
  static ChatTemplate Custom(ChatFormatter formatter);

  // The prompt for `messages`; `add_generation_prompt` ends it with the opening of an
  // assistant turn. Errors (InvalidArgument) for conversations the family cannot express,
  // e.g. invalid tool-call JSON or several tool calls in one Llama 3.1 turn.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const std::vector<ToolDefinition>& tools,
                                     bool add_generation_prompt, const ChatRenderOptions& options = {}) const;

  // "chatml", ..., or "custom".
  std::string Describe() const;
  // Whether the template writes tool definitions; if not, a caller that offers tools must
  // describe them itself (e.g. in the system message).
  bool supports_tools() const;
  // Whether replies start with a <think> reasoning block that the template keeps apart
  // (Qwen3); the engine then returns the reasoning separately (RunResult::reasoning).
  bool supports_reasoning() const;
  // The system prompt the template adds when the conversation has none (may be empty).
  const std::string& default_system_prompt() const;

  struct Spec;

 private:
  explicit ChatTemplate(std::shared_ptr<const Spec> spec) : spec_(std::move(spec)) {}
  std::shared_ptr<const Spec> spec_;
};

}  // namespace hetero

#endif  // HETERO_CHAT_H_
