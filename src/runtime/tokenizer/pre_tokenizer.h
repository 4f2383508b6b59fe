// Pre-tokenization for byte-level BPE: the regular expressions named by
// tokenizer.ggml.pre split text into pieces before merges apply. Each expression is applied
// in turn to every piece; matches and the text between them both become pieces (Hugging
// Face's "isolated" split behaviour). Unicode classes (\p{L}, \p{N}, \s) come from PCRE2
// with UTF and UCP, correct for all of Unicode; patterns are JIT-compiled.
#ifndef HETERO_RUNTIME_TOKENIZER_PRE_TOKENIZER_H_
#define HETERO_RUNTIME_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetero {

class PreTokenizer {
 public:
  // `name` is tokenizer.ggml.pre: "smollm", "llama-bpe" (also "llama3", "llama-v3"),
  // "qwen2", "gpt-2", or "default" (also used when the key is absent). Anything else is
  // Unimplemented, naming it.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(absl::string_view name);

  // Creates one from explicit patterns (tests).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromPatterns(std::string name,
                                                                    const std::vector<std::string>& patterns,
                                                                    bool ignore_merges);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (valid UTF-8) to `pieces`, as views into `text`.
  // Thread-safe. Fails only if the regex engine does (resource limits).
  absl::Status Split(absl::string_view text, std::vector<absl::string_view>& pieces) const;

  const std::string& name() const { return name_; }
  // Llama 3 style: a piece that is itself a token is emitted without applying merges.
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Pattern;
  PreTokenizer() = default;
  absl::Status SplitWith(const Pattern& pattern, absl::string_view piece,
                         std::vector<absl::string_view>& out) const;

  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_TOKENIZER_PRE_TOKENIZER_H_
