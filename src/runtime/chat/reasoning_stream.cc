#include "src/runtime/chat/reasoning_stream.h"

namespace hetero::internal {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

void ReasoningStream::Reset() {
  mode_ = Mode::kStart;
  reasoning_started_ = false;
  pending_.clear();
}

bool ReasoningStream::Push(std::string_view piece) {
  switch (mode_) {
    case Mode::kAnswer:
      return Emit(answer_, piece);
    case Mode::kStart: {
      pending_.append(piece);
      size_t i = 0;
      while (i < pending_.size() && (pending_[i] == ' ' || pending_[i] == '\n')) ++i;
      const std::string_view rest = std::string_view(pending_).substr(i);
      if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return true;  // undecided
      if (rest.substr(0, kOpen.size()) != kOpen) {
        mode_ = Mode::kAnswer;
        std::string all;
        all.swap(pending_);
        return Emit(answer_, all);
      }
      const std::string after(rest.substr(kOpen.size()));
      pending_.clear();
      mode_ = Mode::kReasoning;
      reasoning_started_ = false;
      return Push(after);
    }
    case Mode::kReasoning: {
      if (!reasoning_started_) {
        size_t n = 0;
        while (n < piece.size() && piece[n] == '\n') ++n;
        piece.remove_prefix(n);
        if (piece.empty()) return true;
        reasoning_started_ = true;
      }
      pending_.append(piece);
      const size_t close = pending_.find(kClose);
      if (close != std::string::npos) {
        std::string before = pending_.substr(0, close);
        while (!before.empty() && before.back() == '\n') before.pop_back();
        std::string after = pending_.substr(close + kClose.size());
        pending_.clear();
        mode_ = Mode::kAfterReasoning;
        if (!Emit(reasoning_, before)) return false;
        return Push(after);
      }
      // Hold back what may start "</think>" and trailing newlines (dropped before it).
      size_t keep = 0;
      for (size_t k = std::min(pending_.size(), kClose.size() - 1); k > 0; --k) {
        if (std::string_view(pending_).substr(pending_.size() - k) == kClose.substr(0, k)) {
          keep = k;
          break;
        }
      }
      size_t end = pending_.size() - keep;
      while (end > 0 && pending_[end - 1] == '\n') --end;
      const std::string out = pending_.substr(0, end);
      pending_.erase(0, end);
      return Emit(reasoning_, out);
    }
    case Mode::kAfterReasoning: {
      size_t n = 0;
      while (n < piece.size() && piece[n] == '\n') ++n;
      piece.remove_prefix(n);
      if (piece.empty()) return true;
      mode_ = Mode::kAnswer;
      return Emit(answer_, piece);
    }
  }
  return true;
}

}  // namespace hetero::internal
