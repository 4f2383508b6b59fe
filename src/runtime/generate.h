// The decode loop: prefill a prompt into a sequence, then sample token by token until an
// end-of-generation token, a stop string or the token budget; text is streamed as it
// completes (never half a UTF-8 character, never part of a stop string).
#ifndef HETERO_RUNTIME_GENERATE_H_
#define HETERO_RUNTIME_GENERATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hetero/tokenizer.h"
#include "src/runtime/backend.h"
#include "src/runtime/sampler.h"

namespace hetero {

struct GenerateOptions {
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;
  bool stop_at_end_of_generation = true;  // EOS, EOT, <|im_end|>, ...
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated, without the token that ended generation
  std::string text;             // their text, cut before a stop string
  std::string stop_reason;      // "end_of_generation", "stop_string", "max_tokens" or "cancelled"
  int prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double time_to_first_token_ms = 0;  // prefill plus sampling the first token
};

// Called with each piece of text as it becomes final; return false to stop generation.
using TextCallback = std::function<bool(std::string_view piece)>;

// Runs on a fresh sequence of `backend`, freed before returning.
absl::StatusOr<GenerateResult> Generate(Backend& backend, const Tokenizer& tokenizer,
                                        absl::Span<const int32_t> prompt, const GenerateOptions& options,
                                        const TextCallback& on_text = nullptr);

}  // namespace hetero

#endif  // HETERO_RUNTIME_GENERATE_H_
