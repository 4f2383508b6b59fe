#include "src/runtime/tools/tool_call_constraint.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "src/runtime/tokenizer/tokenizer_impl.h"
#include "src/runtime/tools/tool_call_markers.h"

namespace hetero::internal {
namespace {

constexpr int kMaxSpaces = 2;
constexpr size_t kMaxCachedMasks = 1024;
// Within this many tokens of the budget's end, tokens are checked against the room left.
constexpr int kBudgetHorizon = 64;
// Room kept beyond the shortest completion.
constexpr int kBudgetMargin = 2;

bool IsSpace(uint8_t c) { return c == ' ' || c == '\n'; }

// Formats whose calls follow a marker in free text (Hermes, Granite).
bool IsTagged(ToolCallFormat format) { return format == ToolCallFormat::kHermes || format == ToolCallFormat::kGranite; }

// The marker that opens a call in a tagged format.
std::string_view OpenMarker(ToolCallFormat format) {
  return format == ToolCallFormat::kGranite ? kGraniteCallMarker : kHermesOpenTag;
}

}  // namespace

std::unique_ptr<Grammar> ToolCallGrammar(ToolCallFormat format, const std::vector<std::string>& names,
                                         const std::vector<const SchemaNode*>& schemas, int max_calls,
                                         bool calls_only) {
  switch (format) {
    case ToolCallFormat::kGeneric: return Grammar::GenericReply(names, schemas, max_calls, calls_only);
    case ToolCallFormat::kGranite: return Grammar::ToolCallList(names, schemas, max_calls);
    case ToolCallFormat::kLlama3: return Grammar::ToolCall(names, schemas, "parameters");
    default: return Grammar::ToolCall(names, schemas, "arguments");
  }
}

VocabBytes::VocabBytes(const Tokenizer& tokenizer) {
  const int n = tokenizer.vocab_size();
  bytes.resize(n);
  special.resize(n);
  end_of_generation.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    special[id] = tokenizer.IsControl(id);
    end_of_generation[id] = tokenizer.IsEndOfGeneration(id);
    bytes[id] = special[id] ? std::string(tokenizer.TokenText(id)) : tokenizer.impl().TokenBytes(id);
    if (!special[id] && !bytes[id].empty()) {
      sorted.push_back(id);
      id_of_bytes.emplace(bytes[id], id);
    }
  }
  structural.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    structural[id] = bytes[id].find_first_of("\"\\{[,:<>") != std::string::npos;
    if (structural[id]) structural_ids.push_back(id);
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
                                       ToolCallFormat format, bool call_required)
    : vocab_(std::move(vocab)),
      grammar_(std::move(grammar)),
      format_(format),
      state_{format == ToolCallFormat::kGeneric ? Phase::kJson
             : call_required                    ? Phase::kOpening
                                                : Phase::kWaiting,
             0, 0, {}, JsonMatcher(grammar_->root())} {}

bool ToolCallConstraint::Feed(State& s, uint8_t c) const {
  switch (s.phase) {
    case Phase::kFree:
      return true;
    case Phase::kBroken:
      return true;
    case Phase::kDone:
      return false;  // only an end-of-generation token may follow
    case Phase::kOpening: {
      if (IsSpace(c) && s.suffix_pos == 0 && s.spaces < kMaxSpaces) {
        ++s.spaces;
        return true;
      }
      if (format_ == ToolCallFormat::kLlama3) {
        if (c != '{') return false;
        s.phase = Phase::kJson;
        s.spaces = 0;
        return s.matcher.Feed(c);
      }
      const std::string_view marker = OpenMarker(format_);
      if (s.suffix_pos >= marker.size() || c != static_cast<uint8_t>(marker[s.suffix_pos])) return false;
      if (++s.suffix_pos == marker.size()) {
        s.phase = Phase::kJson;
        s.spaces = 0;
        s.suffix_pos = 0;
        s.matcher = JsonMatcher(grammar_->root());
      }
      return true;
    }
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
      {
        const std::string_view marker = OpenMarker(format_);
        s.recent.push_back(static_cast<char>(c));
        if (s.recent.size() > marker.size()) s.recent.erase(0, s.recent.size() - marker.size());
        if (s.recent == marker) {
          s.phase = Phase::kJson;
          s.spaces = 0;
          s.recent.clear();
          s.matcher = JsonMatcher(grammar_->root());
        }
      }
      return true;
    case Phase::kJson:
      if (IsTagged(format_) && !s.matcher.started() && IsSpace(c) && s.spaces < kMaxSpaces) {
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
      if (c != static_cast<uint8_t>(kHermesCloseTag[s.suffix_pos])) return false;
      if (++s.suffix_pos == kHermesCloseTag.size()) {
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
    // Special tokens are never part of a call; in free text (or opening a required call)
    // they may spell the marker.
    if (s.phase != Phase::kWaiting && s.phase != Phase::kOpening) return false;
  }
  if (s.phase == Phase::kWaiting && IsTagged(format_) &&
      vocab_->bytes[token].find('<') == std::string::npos && s.recent.empty()) {
    return true;  // free text that cannot start the marker
  }
  State copy = s;
  return FeedAll(copy, vocab_->bytes[token]);
}

bool ToolCallConstraint::Allows(int32_t token) {
  if (closing_) {
    // Only tokens on a fewest-token spelling of the completion.
    if (token < 0 || token >= static_cast<int32_t>(vocab_->bytes.size()) || vocab_->special[token]) return false;
    const std::string& b = vocab_->bytes[token];
    return !b.empty() && b.size() <= completion_.bytes.size() && completion_.bytes.compare(0, b.size(), b) == 0 &&
           completion_.min_tokens[b.size()] + 1 == completion_.tokens();
  }
  return AllowsWithinBudget(token);
}

bool ToolCallConstraint::FitsBudget(const State& after) const {
  if (after.phase != Phase::kJson && after.phase != Phase::kSuffix && after.phase != Phase::kOpening) return true;
  // After this token, remaining_ - 1 tokens are left for the completion.
  return Completion(after).tokens() + kBudgetMargin <= remaining_ - 1;
}

bool ToolCallConstraint::SkipsBudgetCheck(int32_t token) const {
  // Inside a string value, a token without '"' or '\\' leaves the completion as it was.
  return remaining_ > kBudgetHorizon || vocab_->end_of_generation[token] || state_.phase == Phase::kDone ||
         (state_.phase == Phase::kJson && state_.matcher.InStringBody() && !vocab_->structural[token]) ||
         state_.phase == Phase::kFree || state_.phase == Phase::kBroken ||
         (state_.phase == Phase::kWaiting && !vocab_->structural[token]);
}

bool ToolCallConstraint::TokenFitsBudget(int32_t token) const {
  const std::string& b = vocab_->bytes[token];
  if (plan_valid_ && b.size() <= completion_.bytes.size() && completion_.bytes.compare(0, b.size(), b) == 0) {
    // On the shortest completion: the rest of it is the shortest from there.
    return completion_.min_tokens[b.size()] + kBudgetMargin <= remaining_ - 1;
  }
  State after = state_;
  return FeedAll(after, b) && FitsBudget(after);
}

bool ToolCallConstraint::AllowsWithinBudget(int32_t token) const {
  if (!AllowsToken(state_, token)) return false;
  return SkipsBudgetCheck(token) || TokenFitsBudget(token);
}

namespace {

// Bytes tried when completing a call: closing bytes first, then what starts the smallest
// values, then every other printable byte, then continuation bytes to finish a character.
const std::string& CompletionBytes() {
  static const std::string order = [] {
    std::string o = "\"}]0-{[tfn,: 1";
    for (int c = 0x20; c < 0x7F; ++c) {
      if (o.find(static_cast<char>(c)) == std::string::npos) o.push_back(static_cast<char>(c));
    }
    o += "\x80\xA0";
    return o;
  }();
  return order;
}

constexpr size_t kMaxCompletionStates = 4096;
constexpr size_t kMaxCachedCompletions = 4096;

}  // namespace

bool ToolCallConstraint::Closed(const State& s) const {
  return s.phase == Phase::kDone || (format_ == ToolCallFormat::kHermes && s.phase == Phase::kWaiting);
}

std::string ToolCallConstraint::GreedyCompletion(const State& s) const {
  State cur = s;
  std::string out;
  for (int step = 0; step < 256; ++step) {
    if (Closed(cur)) return out;
    bool advanced = false;
    for (char c : CompletionBytes()) {
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

std::string ToolCallConstraint::ShortestCompletionBytes(const State& s) const {
  // States that differ only in a number's digits are merged (else each digit would branch
  // the search tenfold), so the result is the shortest up to that merge.
  const std::string start_key = KeyOf(s, /*coarse=*/true);
  // Breadth-first over the bytes, states merged by key: the shortest completion (a greedy
  // walk can pick a long key or literal, e.g. "tool_calls" where "response" would do).
  struct Node {
    State state;
    int parent;
    char byte;
  };
  std::vector<Node> nodes;
  nodes.push_back({s, -1, 0});
  absl::flat_hash_set<std::string> seen = {start_key};
  int found = -1;
  std::string candidates;
  for (size_t head = 0; head < nodes.size() && found < 0 && nodes.size() < kMaxCompletionStates; ++head) {
    // Only bytes the matcher may take next (inside a string, '"' and one plain byte stand
    // for all: every plain byte leads to the same state). Outside JSON (the closing tag),
    // every byte.
    const State& from = nodes[head].state;
    candidates.clear();
    if (from.phase == Phase::kJson && from.matcher.started()) {
      from.matcher.AppendNextByteCandidates(candidates);
    } else {
      candidates = CompletionBytes();
    }
    for (char c : candidates) {
      State next = nodes[head].state;
      if (!Feed(next, static_cast<uint8_t>(c))) continue;
      const bool closed = Closed(next);
      if (!closed && !seen.insert(KeyOf(next, /*coarse=*/true)).second) continue;
      nodes.push_back({std::move(next), static_cast<int>(head), c});
      if (closed) {
        found = static_cast<int>(nodes.size()) - 1;
        break;
      }
    }
  }
  std::string out;
  if (found >= 0) {
    for (int i = found; nodes[i].parent >= 0; i = nodes[i].parent) out.push_back(nodes[i].byte);
    std::reverse(out.begin(), out.end());
    return out;
  }
  return GreedyCompletion(s);  // too many states to search: a completion, maybe not the shortest
}

ToolCallConstraint::CompletionPlan ToolCallConstraint::Completion(const State& s) const {
  if (s.phase != Phase::kJson && s.phase != Phase::kSuffix && s.phase != Phase::kOpening) return {};
  const std::string key = KeyOf(s);
  if (auto it = completions_.find(key); it != completions_.end()) return it->second;
  CompletionPlan plan;
  State closed = s;
  if (s.phase == Phase::kOpening) {
    // A required call not opened yet: the rest of its marker, then the shortest call.
    const std::string opening =
        format_ == ToolCallFormat::kLlama3 ? std::string("{") : std::string(OpenMarker(format_).substr(s.suffix_pos));
    State opened = s;
    plan.bytes = FeedAll(opened, opening) ? opening + Completion(opened).bytes : "";
  } else if (s.phase == Phase::kJson && s.matcher.InStringBody() && Feed(closed, '"')) {
    // Inside a string that may end now, the shortest completion ends it at once: '"' and
    // the shortest from there, which strings of every length share (one search, not one
    // per length).
    plan.bytes = "\"" + Completion(closed).bytes;
  } else if (s.phase == Phase::kJson && s.matcher.InNumberBody()) {
    // A number that may end now: the shortest completion ends it with the parent's next
    // byte (more digits first would only add bytes; what follows does not depend on the
    // digits). Each ending is searched once for all numbers at that place.
    bool found = false;
    for (char end : {',', '}', ']'}) {
      State ended = s;
      if (!Feed(ended, static_cast<uint8_t>(end))) continue;
      CompletionPlan rest = Completion(ended);
      if (rest.tokens() >= kUnreachable && !Closed(ended)) continue;
      std::string candidate = std::string(1, end) + rest.bytes;
      if (!found || candidate.size() < plan.bytes.size()) plan.bytes = std::move(candidate);
      found = true;
    }
    if (!found) plan.bytes = ShortestCompletionBytes(s);
  } else {
    plan.bytes = ShortestCompletionBytes(s);
  }
  const size_t n = plan.bytes.size();
  // Fewest tokens for each suffix, from the end (every byte has a token in byte-level
  // vocabularies; a gap leaves kUnreachable).
  plan.min_tokens.assign(n + 1, kUnreachable);
  plan.min_tokens[n] = 0;
  if (n == 0 && !Closed(s)) plan.min_tokens[0] = kUnreachable;  // nothing completes it
  for (size_t i = n; i-- > 0;) {
    for (size_t len = 1; len <= std::min(n - i, vocab_->longest); ++len) {
      if (plan.min_tokens[i + len] >= kUnreachable) continue;
      if (vocab_->id_of_bytes.contains(absl::string_view(plan.bytes).substr(i, len))) {
        plan.min_tokens[i] = std::min(plan.min_tokens[i], plan.min_tokens[i + len] + 1);
      }
    }
  }
  if (completions_.size() >= kMaxCachedCompletions) completions_.clear();
  completions_.emplace(key, plan);
  return plan;
}

void ToolCallConstraint::SetBudget(int remaining_tokens) {
  remaining_ = remaining_tokens;
  closing_ = false;
  if (remaining_tokens > kBudgetHorizon ||
      (state_.phase != Phase::kJson && state_.phase != Phase::kSuffix && state_.phase != Phase::kOpening)) {
    plan_valid_ = false;
    return;
  }
  if (!plan_valid_) {
    completion_ = Completion(state_);
    plan_valid_ = true;
  }
  closing_ = !completion_.bytes.empty() && completion_.tokens() < kUnreachable &&
             completion_.tokens() + kBudgetMargin >= remaining_tokens - 1;
}

void ToolCallConstraint::Accept(int32_t token) {
  closing_ = false;
  if (token < 0 || token >= static_cast<int32_t>(vocab_->bytes.size()) || vocab_->end_of_generation[token]) {
    plan_valid_ = false;
    return;
  }
  // Carry the completion over when the token follows it (the rest is then the shortest
  // from the new state), or only adds characters to a string it closes at once; anything
  // else is searched again at the next SetBudget.
  const std::string& b = vocab_->bytes[token];
  if (plan_valid_) {
    if (b.size() <= completion_.bytes.size() && completion_.bytes.compare(0, b.size(), b) == 0) {
      completion_.bytes.erase(0, b.size());
      completion_.min_tokens.erase(completion_.min_tokens.begin(), completion_.min_tokens.begin() + b.size());
    } else {
      plan_valid_ = state_.phase == Phase::kJson && state_.matcher.InStringBody() && !vocab_->structural[token] &&
                    !completion_.bytes.empty() && completion_.bytes[0] == '"';
    }
  }
  if (!FeedAll(state_, b)) {
    state_.phase = Phase::kBroken;
    plan_valid_ = false;
  }
}

std::string ToolCallConstraint::KeyOf(const State& s, bool coarse) const {
  std::string key = coarse ? s.matcher.CoarseKey() : s.matcher.Key();
  key.push_back(static_cast<char>(s.phase));
  key.push_back(static_cast<char>(s.spaces));
  key.push_back(static_cast<char>(s.suffix_pos));
  key += s.recent;
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
  const std::string key = KeyOf(state_);
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
  const std::vector<uint64_t>* allowed_ptr = &it->second;
  std::vector<uint64_t> within_budget;
  if (remaining_ <= kBudgetHorizon) {
    // Not cached: it depends on the tokens left. Inside a string only tokens with '"' or
    // '\\' need the check; elsewhere few tokens are allowed, and each is checked.
    within_budget = it->second;
    const bool in_string = state_.matcher.InStringBody();
    const auto check = [&](int32_t id) {
      if (((within_budget[id / 64] >> (id % 64)) & 1) == 0 || SkipsBudgetCheck(id)) return;
      if (!TokenFitsBudget(id)) within_budget[id / 64] &= ~(uint64_t{1} << (id % 64));
    };
    if (in_string) {
      for (int32_t id : vocab_->structural_ids) check(id);
    } else {
      for (int32_t id = 0; id < limit; ++id) check(id);
    }
    allowed_ptr = &within_budget;
  }
  const std::vector<uint64_t>& allowed = *allowed_ptr;
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
