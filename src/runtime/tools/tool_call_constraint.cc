#include "src/runtime/tools/tool_call_constraint.h"

#include <algorithm>
#include <limits>

#include "src/runtime/tokenizer/tokenizer_impl.h"

namespace hetero::internal {
namespace {

constexpr std::string_view kOpenTag = "<tool_call>";
constexpr std::string_view kCloseTag = "</tool_call>";
constexpr int kMaxSpaces = 2;
constexpr size_t kMaxCachedMasks = 1024;

bool IsSpace(uint8_t c) { return c == ' ' || c == '\n'; }

}  // namespace

VocabBytes::VocabBytes(const Tokenizer& tokenizer) {
  const int n = tokenizer.vocab_size();
  bytes.resize(n);
  special.resize(n);
  end_of_generation.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    special[id] = tokenizer.IsControl(id);
    end_of_generation[id] = tokenizer.IsEndOfGeneration(id);
    bytes[id] = special[id] ? std::string(tokenizer.TokenText(id)) : tokenizer.impl().TokenBytes(id);
    if (!special[id] && !bytes[id].empty()) sorted.push_back(id);
  }
  std::sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  shared_prefix.resize(sorted.size());
  sorted_offset.push_back(0);
  for (size_t i = 0; i < sorted.size(); ++i) {
    const std::string& cur = bytes[sorted[i]];
    sorted_text += cur;
    sorted_offset.push_back(static_cast<uint32_t>(sorted_text.size()));
    longest = std::max(longest, cur.size());
    if (i == 0) continue;
    const std::string& prev = bytes[sorted[i - 1]];
    uint32_t k = 0;
    while (k < prev.size() && k < cur.size() && prev[k] == cur[k]) ++k;
    shared_prefix[i] = k;
  }
}

ToolCallConstraint::ToolCallConstraint(std::shared_ptr<const VocabBytes> vocab, std::shared_ptr<const Grammar> grammar,
                                       ToolCallFormat format)
    : vocab_(std::move(vocab)),
      grammar_(std::move(grammar)),
      format_(format),
      state_{format == ToolCallFormat::kGeneric ? Phase::kJson : Phase::kWaiting, 0, 0, {}, JsonMatcher(grammar_->root())} {}

bool ToolCallConstraint::Feed(State& s, uint8_t c) const {
  switch (s.phase) {
    case Phase::kFree:
      return true;
    case Phase::kBroken:
      return true;
    case Phase::kDone:
      return false;  // only an end-of-generation token may follow
    case Phase::kWaiting:
      if (format_ == ToolCallFormat::kLlama3) {
        // The reply is a call exactly when it opens with '{'.
        if (IsSpace(c) && s.spaces < kMaxSpaces) {
          ++s.spaces;
          return true;
        }
        if (c != '{') {
          s.phase = Phase::kFree;
          return true;
        }
        s.phase = Phase::kJson;
        s.spaces = 0;
        return s.matcher.Feed(c);
      }
      s.recent.push_back(static_cast<char>(c));
      if (s.recent.size() > kOpenTag.size()) s.recent.erase(0, s.recent.size() - kOpenTag.size());
      if (s.recent == kOpenTag) {
        s.phase = Phase::kJson;
        s.spaces = 0;
        s.recent.clear();
        s.matcher = JsonMatcher(grammar_->root());
      }
      return true;
    case Phase::kJson:
      if (format_ == ToolCallFormat::kHermes && !s.matcher.started() && IsSpace(c) && s.spaces < kMaxSpaces) {
        ++s.spaces;
        return true;
      }
      if (!s.matcher.Feed(c)) return false;
      if (s.matcher.done()) {
        s.phase = format_ == ToolCallFormat::kHermes ? Phase::kSuffix : Phase::kDone;
        s.spaces = 0;
        s.suffix_pos = 0;
      }
      return true;
    case Phase::kSuffix:
      if (s.suffix_pos == 0 && IsSpace(c) && s.spaces < kMaxSpaces) {
        ++s.spaces;
        return true;
      }
      if (c != static_cast<uint8_t>(kCloseTag[s.suffix_pos])) return false;
      if (++s.suffix_pos == kCloseTag.size()) {
        s.phase = Phase::kWaiting;  // free text, or another call
        s.spaces = 0;
      }
      return true;
  }
  return false;
}

bool ToolCallConstraint::FeedAll(State& s, std::string_view bytes) const {
  for (char c : bytes) {
    if (!Feed(s, static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool ToolCallConstraint::AllowsEnd(const State& s) const {
  return s.phase == Phase::kWaiting || s.phase == Phase::kFree || s.phase == Phase::kDone || s.phase == Phase::kBroken;
}

bool ToolCallConstraint::AllowsToken(const State& s, int32_t token) const {
  if (token < 0 || token >= static_cast<int32_t>(vocab_->bytes.size())) return false;
  if (vocab_->end_of_generation[token]) return AllowsEnd(s);
  if (s.phase == Phase::kFree || s.phase == Phase::kBroken) return true;
  if (vocab_->special[token]) {
    // Special tokens are never part of a call; in free text they may complete the marker.
    if (s.phase != Phase::kWaiting) return false;
  }
  if (s.phase == Phase::kWaiting && format_ == ToolCallFormat::kHermes &&
      vocab_->bytes[token].find('<') == std::string::npos && s.recent.empty()) {
    return true;  // free text that cannot start the marker
  }
  State copy = s;
  return FeedAll(copy, vocab_->bytes[token]);
}

bool ToolCallConstraint::Allows(int32_t token) {
  if (closing_) {
    if (token < 0 || token >= static_cast<int32_t>(vocab_->bytes.size()) || vocab_->special[token]) return false;
    const std::string& b = vocab_->bytes[token];
    return !b.empty() && completion_.compare(0, b.size(), b) == 0;
  }
  return AllowsToken(state_, token);
}

std::string ToolCallConstraint::Completion(const State& s) const {
  if (s.phase != Phase::kJson && s.phase != Phase::kSuffix) return "";
  // Greedy: at each step the first byte, in this order, that the grammar accepts. Closing
  // bytes come first, then what starts the smallest values; keys and literals are forced.
  static const std::string kOrder = [] {
    std::string order = "\"}]0-{[tfn,: 1";
    for (int c = 0x20; c < 0x7F; ++c) {
      if (order.find(static_cast<char>(c)) == std::string::npos) order.push_back(static_cast<char>(c));
    }
    order += "\x80\xA0";  // to finish a multi-byte character
    return order;
  }();
  State cur = s;
  std::string out;
  for (int step = 0; step < 256; ++step) {
    if (cur.phase == Phase::kDone || (format_ == ToolCallFormat::kHermes && cur.phase == Phase::kWaiting)) return out;
    bool advanced = false;
    for (char c : kOrder) {
      State next = cur;
      if (Feed(next, static_cast<uint8_t>(c))) {
        cur = std::move(next);
        out.push_back(c);
        advanced = true;
        break;
      }
    }
    if (!advanced) return "";
  }
  return "";
}

void ToolCallConstraint::SetBudget(int remaining_tokens) {
  closing_ = false;
  if (remaining_tokens > 64 || (state_.phase != Phase::kJson && state_.phase != Phase::kSuffix)) return;
  completion_ = Completion(state_);
  // One byte per token in the worst case (every byte is a token of its own).
  closing_ = !completion_.empty() && static_cast<int>(completion_.size()) >= remaining_tokens - 1;
}

void ToolCallConstraint::Accept(int32_t token) {
  if (token < 0 || token >= static_cast<int32_t>(vocab_->bytes.size()) || vocab_->end_of_generation[token]) return;
  if (!FeedAll(state_, vocab_->bytes[token])) state_.phase = Phase::kBroken;
}

std::string ToolCallConstraint::CacheKey() const {
  std::string key = state_.matcher.Key();
  key.push_back(static_cast<char>(state_.phase));
  key.push_back(static_cast<char>(state_.spaces));
  key.push_back(static_cast<char>(state_.suffix_pos));
  key += state_.recent;
  return key;
}

bool ToolCallConstraint::Mask(absl::Span<float> logits) {
  const int n = static_cast<int>(vocab_->bytes.size());
  const int limit = std::min<int>(n, static_cast<int>(logits.size()));
  if (state_.phase == Phase::kFree || state_.phase == Phase::kBroken) return true;
  if (closing_) {
    bool any = false;
    for (int id = 0; id < limit; ++id) {
      if (Allows(id)) {
        any = true;
      } else {
        logits[id] = -std::numeric_limits<float>::infinity();
      }
    }
    return any;
  }
  const std::string key = CacheKey();
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    std::vector<uint64_t> allowed((n + 63) / 64, 0);
    const auto allow = [&](int32_t id) { allowed[id / 64] |= uint64_t{1} << (id % 64); };
    // Depth-first over the sorted tokens: states[d] is the state after the first d bytes
    // of the current token. `fed` bytes of it are in states; `refused_at` >= 0 when byte
    // refused_at of the previous token was refused, which refuses every following token
    // that shares more than refused_at bytes with it.
    std::vector<State> states(vocab_->longest + 1, state_);
    size_t fed = 0;
    int64_t refused_at = -1;
    for (size_t i = 0; i < vocab_->sorted.size(); ++i) {
      const uint32_t shared = vocab_->shared_prefix[i];
      if (refused_at >= 0 && shared > refused_at) continue;
      refused_at = -1;
      fed = std::min<size_t>(fed, shared);
      const std::string_view bytes(vocab_->sorted_text.data() + vocab_->sorted_offset[i],
                                   vocab_->sorted_offset[i + 1] - vocab_->sorted_offset[i]);
      for (; fed < bytes.size(); ++fed) {
        states[fed + 1] = states[fed];
        if (!Feed(states[fed + 1], static_cast<uint8_t>(bytes[fed]))) {
          refused_at = static_cast<int64_t>(fed);
          break;
        }
      }
      if (refused_at < 0) allow(vocab_->sorted[i]);
    }
    for (int32_t id = 0; id < n; ++id) {
      if ((vocab_->special[id] || vocab_->end_of_generation[id] || vocab_->bytes[id].empty()) && AllowsToken(state_, id)) {
        allow(id);
      }
    }
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    it = cache_.emplace(key, std::move(allowed)).first;
    ++masks_computed_;
  } else {
    ++masks_cached_;
  }
  const std::vector<uint64_t>& allowed = it->second;
  bool any = false;
  for (int id = 0; id < limit; ++id) {
    if ((allowed[id / 64] >> (id % 64)) & 1) {
      any = true;
    } else {
      logits[id] = -std::numeric_limits<float>::infinity();
    }
  }
  return any;
}

}  // namespace hetero::internal
