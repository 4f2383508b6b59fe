// Streams a reasoning model's reply apart as it is generated: the text of a leading
// <think>...</think> block to one callback, the answer after it (leading newlines dropped)
// to another, with markers that arrive split across pieces handled. The streamed parts
// equal SplitReasoning() of the whole reply.
#ifndef HETERO_RUNTIME_CHAT_REASONING_STREAM_H_
#define HETERO_RUNTIME_CHAT_REASONING_STREAM_H_

#include <functional>
#include <string>
#include <string_view>

namespace hetero::internal {

class ReasoningStream {
 public:
  using Sink = std::function<bool(std::string_view piece)>;
  // Either sink may be empty (its text is dropped).
  ReasoningStream(Sink reasoning, Sink answer) : reasoning_(std::move(reasoning)), answer_(std::move(answer)) {}

  // A piece of the reply; false when a sink asks to stop.
  bool Push(std::string_view piece);
  // The next reply starts (the agent loop's next round).
  void Reset();

 private:
  enum class Mode { kStart, kReasoning, kAfterReasoning, kAnswer };
  bool Emit(const Sink& sink, std::string_view text) const { return !sink || text.empty() || sink(text); }

  Sink reasoning_, answer_;
  Mode mode_ = Mode::kStart;
  bool reasoning_started_ = false;  // kReasoning: text other than leading newlines seen
  std::string pending_;  // kStart: the reply so far; kReasoning: a possible start of "</think>" and newlines
};

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_CHAT_REASONING_STREAM_H_
