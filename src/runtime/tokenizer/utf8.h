// UTF-8 helpers for the tokenizers: validation that splits text into valid runs and stray
// bytes, code point iteration, and the completeness check the streaming detokenizer needs.
#ifndef HETERO_RUNTIME_TOKENIZER_UTF8_H_
#define HETERO_RUNTIME_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace hetero {

// Length of the valid UTF-8 sequence starting at s[0], or 0 when s does not start with
// one (stray continuation byte, overlong form, surrogate, beyond U+10FFFF, truncated).
size_t ValidUtf8SequenceLength(absl::string_view s);

// Splits `text` into maximal valid UTF-8 runs and single invalid bytes, in order.
struct Utf8Segment {
  absl::string_view bytes;
  bool valid;
};
std::vector<Utf8Segment> SplitValidUtf8(absl::string_view text);

bool IsValidUtf8(absl::string_view text);

// Appends code point `cp` (<= U+10FFFF, not a surrogate) encoded as UTF-8.
void AppendUtf8(uint32_t cp, std::string& out);

// Appends `bytes` with every ill-formed part replaced by U+FFFD, one per maximal subpart
// (Unicode's recommended practice, as from_utf8_lossy and Python's "replace" do).
void AppendUtf8Lossy(absl::string_view bytes, std::string& out);

// Number of bytes at the end of `s` that form an incomplete (but so far valid) UTF-8
// sequence: what a streaming decoder must hold back. 0 when `s` ends on a boundary or
// with bytes that can never complete.
size_t IncompleteUtf8Suffix(absl::string_view s);

}  // namespace hetero

#endif  // HETERO_RUNTIME_TOKENIZER_UTF8_H_
