#include "src/runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string: text
// that may still turn into a stop string and must not be streamed yet.
size_t PendingStopPrefix(const std::string& text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& stop : stops) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > longest; --len) {
      if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

class SequenceGuard {
 public:
  SequenceGuard(Backend& backend, SequenceId seq) : backend_(backend), seq_(seq) {}
  ~SequenceGuard() { backend_.FreeSequence(seq_); }

 private:
  Backend& backend_;
  SequenceId seq_;
};

}  // namespace

absl::StatusOr<GenerateResult> Generate(Backend& backend, const Tokenizer& tokenizer, absl::Span<const int32_t> prompt,
                                        const GenerateOptions& options, const TextCallback& on_text) {
  if (prompt.empty()) return absl::InvalidArgumentError("generate: the prompt has no tokens");
  if (options.max_tokens < 0) return absl::InvalidArgumentError("generate: max_tokens is negative");
  for (const std::string& stop : options.stop_strings) {
    if (stop.empty()) return absl::InvalidArgumentError("generate: empty stop string");
  }
  HETERO_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(options.sampling));
  HETERO_ASSIGN_OR_RETURN(SequenceId seq, backend.NewSequence());
  SequenceGuard guard(backend, seq);

  GenerateResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  std::vector<float> logits(backend.vocab_size());
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  const auto start = std::chrono::steady_clock::now();
  HETERO_RETURN_IF_ERROR(backend.Prefill(seq, prompt, absl::MakeSpan(logits)));
  result.prefill_seconds = SecondsSince(start);

  StreamingDetokenizer detokenizer(tokenizer, /*skip_special=*/true);
  size_t streamed = 0;  // bytes of result.text already passed to on_text
  auto stream_until = [&](size_t end) {
    if (end <= streamed) return true;
    const bool go_on = !on_text || on_text(std::string_view(result.text).substr(streamed, end - streamed));
    streamed = end;
    return go_on;
  };

  result.stop_reason = "max_tokens";
  const auto decode_start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.max_tokens; ++i) {
    const int32_t token = sampler.Sample(absl::MakeSpan(logits), history);
    if (i == 0) result.time_to_first_token_ms = SecondsSince(start) * 1e3;
    if (options.stop_at_end_of_generation && tokenizer.IsEndOfGeneration(token)) {
      result.stop_reason = "end_of_generation";
      break;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    HETERO_ASSIGN_OR_RETURN(std::string piece, detokenizer.Push(token));
    result.text += piece;
    // A completed stop string ends generation; text that could begin one waits.
    bool stopped = false;
    for (const std::string& stop : options.stop_strings) {
      const size_t from = result.text.size() - piece.size() >= stop.size() ? result.text.size() - piece.size() - stop.size() + 1 : 0;
      const size_t at = result.text.find(stop, from);
      if (at != std::string::npos) {
        result.text.resize(at);
        stopped = true;
      }
    }
    if (stopped) {
      stream_until(result.text.size());
      result.stop_reason = "stop_string";
      break;
    }
    if (!stream_until(result.text.size() - PendingStopPrefix(result.text, options.stop_strings))) {
      result.stop_reason = "cancelled";
      break;
    }
    if (i + 1 == options.max_tokens) break;  // no logits needed after the last token
    HETERO_RETURN_IF_ERROR(backend.Decode({&seq, 1}, {&token, 1}, absl::MakeSpan(logits)));
  }
  if (result.stop_reason != "stop_string" && result.stop_reason != "cancelled") {
    result.text += detokenizer.Flush();
    stream_until(result.text.size());
  }
  result.decode_seconds = SecondsSince(decode_start);
  return result;
}

}  // namespace hetero
