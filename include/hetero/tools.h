// Host tools the model may call: a registry of tools (name, description, a JSON schema for
// the arguments, a handler and a timeout), the parser of tool calls in model output, and
// the options of the agent loop that runs them (see RunOptions::tool_registry in engine.h).
//
//   hetero::ToolRegistry tools;
//   tools.Register({.name = "add", .description = "Adds two numbers",
//                   .parameters_json = R"({"type": "object", "properties": {
//                       "a": {"type": "number"}, "b": {"type": "number"}},
//                       "required": ["a", "b"]})",
//                   .handler = [](const std::string& args) -> absl::StatusOr<std::string> { ... }});
//
// Supported JSON-schema keywords (anything else is refused at registration, naming the
// keyword and where it is): type (object, array, string, number, integer, boolean, null),
// properties, required, additionalProperties (false only; it is the default), enum (of
// strings, numbers, booleans, null), const, minimum, maximum, minLength, maxLength, items,
// minItems, maxItems, and the annotations description, title, default, examples.
#ifndef HETERO_TOOLS_H_
#define HETERO_TOOLS_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hetero/chat.h"
#include "hetero/export.h"

namespace hetero {

struct Tool {
  std::string name;             // 1-64 characters of [A-Za-z0-9_-]
  std::string description;
  std::string parameters_json;  // a JSON schema whose type is "object"
  // Runs the tool on arguments already validated against the schema (a JSON object as
  // text). The returned text is what the model sees; an error status becomes an error
  // result the model sees. Called on a pool thread; may run concurrently with itself.
  std::function<absl::StatusOr<std::string>(const std::string& arguments_json)> handler;
  std::chrono::milliseconds timeout{10000};
};

namespace internal {
class CompiledSchema;
}

class HETERO_EXPORT ToolRegistry {
 public:
  ToolRegistry();
  ~ToolRegistry();
  ToolRegistry(ToolRegistry&&) noexcept;
  ToolRegistry& operator=(ToolRegistry&&) noexcept;

  // InvalidArgument for a bad name, a duplicate, a missing handler, a non-positive timeout,
  // a schema that is not valid JSON, or an unsupported schema keyword (named with its path).
  absl::Status Register(Tool tool);

  const Tool* Find(std::string_view name) const;
  size_t size() const;
  const Tool& tool(size_t i) const;
  // For chat templates and system prompts.
  std::vector<ToolDefinition> Definitions() const;

  // Checks arguments (a JSON object text) against the tool's schema: InvalidArgument naming
  // the first offending path, e.g. "arguments.unit: 'parsec' is not one of [...]".
  absl::Status ValidateArguments(std::string_view name, std::string_view arguments_json) const;

  // Library-internal: the compiled schema of tool i (for constrained decoding).
  const internal::CompiledSchema& schema(size_t i) const;

 private:
  struct Entry;
  std::vector<std::unique_ptr<Entry>> entries_;
};

// How a model writes tool calls.
enum class ToolCallFormat {
  kAuto,     // from the chat template: Hermes for ChatML with a tool section, Llama 3.1
             // JSON for Llama 3.1+, Granite for Granite 3, else Generic
  kHermes,   // <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one or several
             // (also a JSON list inside one tag)
  kLlama3,   // the reply is {"name": ..., "parameters": {...}} (optionally after
             // <|python_tag|>)
  kGeneric,  // tools described in the system prompt; the whole reply is one JSON object:
             // {"tool_calls": [{"name": ..., "arguments": {...}}, ...]} or {"response": "..."}
  kGranite,  // <|tool_call|>[{"name": ..., "arguments": {...}}, ...] ends the reply (text may
             // come before the marker)
};

HETERO_EXPORT std::string_view ToolCallFormatName(ToolCallFormat format);

// What a reply contains: the text meant for the user (tool-call markup removed; for the
// generic format the "response" string) and the calls, in order. A call that cannot be
// parsed is kept with its error, so that the model can be told.
struct ParsedToolCall {
  std::string name;
  std::string arguments_json;  // normalized (compact) JSON object; empty when unparsable
  std::string error;           // empty when the call parsed
  std::string raw;             // the call's text as the model wrote it
};

struct ParsedReply {
  std::string text;
  std::vector<ParsedToolCall> calls;
  bool is_tool_call() const { return !calls.empty(); }
};

// Never fails: malformed markup becomes calls with errors, or text.
HETERO_EXPORT ParsedReply ParseToolCalls(std::string_view reply, ToolCallFormat format);

}  // namespace hetero

#endif  // HETERO_TOOLS_H_
