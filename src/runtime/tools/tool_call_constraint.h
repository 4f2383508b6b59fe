// The TokenConstraint for tool calls: a JsonMatcher over a tool-call grammar, applied to
// tokens through their bytes. Per format it starts at once (generic), after the
// "<tool_call>" marker (Hermes; then "</tool_call>" must close the call, and free text may
// follow), after "<|tool_call|>" (Granite; a list of calls, then the reply ends), or when
// the reply opens with '{' (Llama 3.1). Masks are cached per matcher
// state, and built by walking the tokens in byte order, so that a prefix shared by many
// tokens is fed once and a refused prefix rejects every token that starts with it.
#ifndef HETERO_RUNTIME_TOOLS_TOOL_CALL_CONSTRAINT_H_
#define HETERO_RUNTIME_TOOLS_TOOL_CALL_CONSTRAINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "hetero/tokenizer.h"
#include "hetero/tools.h"
#include "src/runtime/token_constraint.h"
#include "src/runtime/tools/json_matcher.h"

namespace hetero::internal {

// Every token's bytes, and the ordinary tokens sorted by their bytes (a flattened trie),
// built once per tokenizer.
struct VocabBytes {
  explicit VocabBytes(const Tokenizer& tokenizer);
  std::vector<std::string> bytes;       // text bytes; a special token's own text
  std::vector<bool> special;            // control tokens: never inside a call
  std::vector<bool> end_of_generation;
  // Tokens with a byte that ends a string or opens structure (" \ { [ , : < >): inside a string
  // value, the only ones that can make the shortest completion of the call longer.
  std::vector<bool> structural;
  std::vector<int32_t> structural_ids;
  absl::flat_hash_map<std::string, int32_t> id_of_bytes;  // non-special tokens
  std::vector<int32_t> sorted;          // non-special, non-empty tokens in byte order
  std::vector<uint32_t> shared_prefix;  // bytes sorted[i] shares with sorted[i - 1]
  // sorted[i]'s bytes are sorted_text[sorted_offset[i], sorted_offset[i + 1]): read in
  // order, without a cache miss per token.
  std::string sorted_text;
  std::vector<uint32_t> sorted_offset;
  size_t longest = 0;                   // bytes of the longest token in `sorted`
};

// The grammar of one call turn in `format`: a call object (Hermes, Llama 3.1 with
// "parameters"), a list of 1 to max_calls calls (Granite), the generic reply object
// (`calls_only`: without its answer form).
std::unique_ptr<Grammar> ToolCallGrammar(ToolCallFormat format, const std::vector<std::string>& names,
                                         const std::vector<const SchemaNode*>& schemas, int max_calls,
                                         bool calls_only);

class ToolCallConstraint : public TokenConstraint {
 public:
  // `grammar` must outlive the constraint (shared ownership through the pointer).
  // `call_required` (tool_choice required or named, a router's tool route): the reply opens
  // with a call, "<tool_call>" in Hermes and "<|tool_call|>" in Granite (after at most a few
  // spaces), '{' in Llama 3.1; the
  // generic format's grammar says so itself.
  ToolCallConstraint(std::shared_ptr<const VocabBytes> vocab, std::shared_ptr<const Grammar> grammar,
                     ToolCallFormat format, bool call_required = false);

  bool Allows(int32_t token) override;
  bool Mask(absl::Span<float> logits) override;
  void Accept(int32_t token) override;
  // Near the end of the budget a token is allowed only if the shortest completion of the
  // call after it still fits in the tokens left; at the end, only tokens that spell that
  // completion (closing strings, objects, the tag). So a call is never cut off.
  void SetBudget(int remaining_tokens) override;
  bool closing() const { return closing_; }
  // The shortest completion of the open call from the current state, and the fewest tokens
  // that spell it (tests, benchmarks).
  std::string completion_bytes() const { return Completion(state_).bytes; }
  int completion_tokens() const { return Completion(state_).tokens(); }

  // Statistics for reports and benchmarks.
  int masks_computed() const { return masks_computed_; }
  int masks_cached() const { return masks_cached_; }
  // The output left the grammar (an unconstrained token completed a marker with bytes the
  // grammar refuses); constraint is off for the rest of the job.
  bool broken() const { return state_.phase == Phase::kBroken; }

 private:
  // kOpening: a required call's marker, suffix_pos of its bytes matched.
  enum class Phase : uint8_t { kWaiting, kJson, kSuffix, kDone, kFree, kBroken, kOpening };
  struct State {
    Phase phase;
    uint8_t spaces = 0;      // whitespace bytes taken before the JSON or the closing tag
    uint8_t suffix_pos = 0;  // kSuffix: bytes of "</tool_call>" matched
    std::string recent;      // kWaiting: the text's tail, to find the marker
    JsonMatcher matcher;
  };
  bool Feed(State& s, uint8_t byte) const;
  bool FeedAll(State& s, std::string_view bytes) const;
  bool AllowsEnd(const State& s) const;
  bool AllowsToken(const State& s, int32_t token) const;
  // AllowsToken, and near the end of the budget, room left to complete the call after it.
  bool AllowsWithinBudget(int32_t token) const;
  bool FitsBudget(const State& after) const;
  bool SkipsBudgetCheck(int32_t token) const;
  bool TokenFitsBudget(int32_t token) const;
  std::string KeyOf(const State& s, bool coarse = false) const;
  bool Closed(const State& s) const;  // the call is complete
  // The shortest bytes that complete the open call, and the fewest tokens that spell each
  // of their suffixes: min_tokens[i] for bytes[i..] (kUnreachable if none does).
  struct CompletionPlan {
    std::string bytes;
    std::vector<int> min_tokens = {0};
    int tokens() const { return min_tokens[0]; }
  };
  static constexpr int kUnreachable = 1 << 20;
  // Empty (0 tokens) when no call is open from `s`.
  CompletionPlan Completion(const State& s) const;
  std::string ShortestCompletionBytes(const State& s) const;
  std::string GreedyCompletion(const State& s) const;

  std::shared_ptr<const VocabBytes> vocab_;
  std::shared_ptr<const Grammar> grammar_;
  ToolCallFormat format_;
  State state_;
  absl::flat_hash_map<std::string, std::vector<uint64_t>> cache_;
  mutable absl::flat_hash_map<std::string, CompletionPlan> completions_;  // by state key
  bool closing_ = false;
  int remaining_ = 1 << 30;  // tokens left, this one included (SetBudget)
  CompletionPlan completion_;  // from the current state, when plan_valid_ (SetBudget)
  bool plan_valid_ = false;
  int masks_computed_ = 0;
  int masks_cached_ = 0;
};

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_TOOL_CALL_CONSTRAINT_H_
