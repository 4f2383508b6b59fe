// Streaming a reply that may hold tool calls: what reaches RunOptions::on_text is only the
// text meant for the user. Hermes: text outside <tool_call> tags (a possible start of the
// tag is held back until it is decided). Granite: text before "<|tool_call|>", nothing
// after it. Llama 3.1: nothing when the reply opens with '{'.
// Generic: the characters of the "response" string, unescaped, as they arrive; nothing of
// a tool-call object.
#ifndef HETERO_RUNTIME_TOOLS_REPLY_STREAM_H_
#define HETERO_RUNTIME_TOOLS_REPLY_STREAM_H_

#include <functional>
#include <string>
#include <string_view>

#include "hetero/tools.h"

namespace hetero::internal {

class ReplyStream {
 public:
  using Sink = std::function<bool(std::string_view)>;
  ReplyStream(ToolCallFormat format, Sink sink) : format_(format), sink_(std::move(sink)) {}

  // False when the sink asked to stop.
  bool Push(std::string_view piece);

 private:
  enum class Mode { kUndecided, kText, kSuppress, kResponseString, kDone };
  bool Emit(std::string_view text);
  bool PushHermes(std::string_view piece);
  bool PushGranite(std::string_view piece);
  bool PushGeneric(std::string_view piece);
  bool PushResponseChars(std::string_view piece);

  ToolCallFormat format_;
  Sink sink_;
  Mode mode_ = Mode::kUndecided;
  std::string pending_;  // bytes not yet decided
  bool in_tag_ = false;  // Hermes: inside <tool_call> ... </tool_call>; Granite: after <|tool_call|>
  std::string escape_;   // generic: an escape sequence in progress
};

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_REPLY_STREAM_H_
