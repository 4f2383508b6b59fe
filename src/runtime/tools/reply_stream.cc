#include "src/runtime/tools/reply_stream.h"

#include <cstdint>

#include "src/runtime/tokenizer/utf8.h"
#include "src/runtime/tools/tool_call_markers.h"

namespace hetero::internal {
namespace {


bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

bool ReplyStream::Emit(std::string_view text) { return text.empty() || !sink_ || sink_(text); }

bool ReplyStream::Push(std::string_view piece) {
  switch (format_) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kAuto:
      return PushHermes(piece);
    case ToolCallFormat::kGeneric:
      return PushGeneric(piece);
    case ToolCallFormat::kGranite:
      return PushGranite(piece);
    case ToolCallFormat::kLlama3: {
      if (mode_ == Mode::kUndecided) {
        pending_ += piece;
        size_t i = 0;
        while (i < pending_.size() && IsSpace(pending_[i])) ++i;
        if (i == pending_.size()) return true;
        mode_ = pending_[i] == '{' ? Mode::kSuppress : Mode::kText;
        std::string all;
        all.swap(pending_);
        return mode_ == Mode::kText ? Emit(all) : true;
      }
      return mode_ == Mode::kText ? Emit(piece) : true;
    }
  }
  return Emit(piece);
}

bool ReplyStream::PushHermes(std::string_view piece) {
  pending_ += piece;
  std::string out;
  for (;;) {
    const std::string_view tag = in_tag_ ? kHermesCloseTag : kHermesOpenTag;
    const size_t at = pending_.find(tag);
    if (at != std::string::npos) {
      if (!in_tag_) out += pending_.substr(0, at);
      pending_.erase(0, at + tag.size());
      in_tag_ = !in_tag_;
      continue;
    }
    // Keep a possible partial tag; inside a call, keep only that (the rest is dropped).
    const size_t keep = PartialTag(pending_, tag);
    if (!in_tag_) out += pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    break;
  }
  return Emit(out);
}

bool ReplyStream::PushGranite(std::string_view piece) {
  if (in_tag_) return true;  // the calls run to the end of the reply
  pending_ += piece;
  const size_t at = pending_.find(kGraniteCallMarker);
  if (at != std::string::npos) {
    in_tag_ = true;
    const std::string before = pending_.substr(0, at);
    pending_.clear();
    return Emit(before);
  }
  const size_t keep = PartialTag(pending_, kGraniteCallMarker);
  const std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return Emit(out);
}

bool ReplyStream::PushGeneric(std::string_view piece) {
  if (mode_ == Mode::kResponseString) return PushResponseChars(piece);
  if (mode_ == Mode::kText) return Emit(piece);
  if (mode_ == Mode::kSuppress || mode_ == Mode::kDone) return true;
  pending_ += piece;
  size_t i = 0;
  while (i < pending_.size() && IsSpace(pending_[i])) ++i;
  const std::string_view head = std::string_view(pending_).substr(i);
  if (head.empty()) return true;
  if (head[0] != '{') {  // a plain-text answer, not JSON
    mode_ = Mode::kText;
    std::string all(head);
    pending_.clear();
    return Emit(all);
  }
  for (std::string_view opening : {std::string_view("{\"response\": \""), std::string_view("{\"response\":\"")}) {
    if (head.size() >= opening.size() && head.substr(0, opening.size()) == opening) {
      mode_ = Mode::kResponseString;
      const std::string rest(head.substr(opening.size()));
      pending_.clear();
      return PushResponseChars(rest);
    }
  }
  for (std::string_view opening : {std::string_view("{\"response\": \""), std::string_view("{\"response\":\"")}) {
    if (opening.substr(0, head.size()) == head) return true;  // still a prefix: wait
  }
  mode_ = Mode::kSuppress;  // a tool-call object
  pending_.clear();
  return true;
}

bool ReplyStream::PushResponseChars(std::string_view piece) {
  std::string out;
  for (char c : piece) {
    if (mode_ == Mode::kDone) break;
    if (!escape_.empty()) {
      escape_.push_back(c);
      if (escape_.size() == 2 && escape_[1] != 'u') {
        switch (escape_[1]) {
          case 'n': out.push_back('\n'); break;
          case 't': out.push_back('\t'); break;
          case 'r': out.push_back('\r'); break;
          case 'b': out.push_back('\b'); break;
          case 'f': out.push_back('\f'); break;
          default: out.push_back(escape_[1]); break;  // \" \\ \/
        }
        escape_.clear();
      } else if (escape_.size() == 6) {
        const uint32_t cp = static_cast<uint32_t>(std::strtoul(escape_.substr(2).c_str(), nullptr, 16));
        AppendUtf8(cp >= 0xD800 && cp <= 0xDFFF ? 0xFFFD : cp, out);
        escape_.clear();
      }
      continue;
    }
    if (c == '\\') {
      escape_.push_back('\\');  // escape_ is empty here
    } else if (c == '"') {
      mode_ = Mode::kDone;
    } else {
      out.push_back(c);
    }
  }
  return Emit(out);
}

}  // namespace hetero::internal
