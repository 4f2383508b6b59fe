// SentencePiece BPE (tokenizer.ggml.model = "llama": Llama 2, TinyLlama): spaces become
// U+2581, a space is prefixed when the vocabulary asks for it, characters are merged by
// the highest score of the merged piece (leftmost on ties), and characters no piece covers
// fall back to <0xNN> byte tokens.
#ifndef HETERO_RUNTIME_TOKENIZER_SENTENCE_PIECE_ENCODER_H_
#define HETERO_RUNTIME_TOKENIZER_SENTENCE_PIECE_ENCODER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/runtime/tokenizer/vocab.h"

namespace hetero {

class SentencePieceEncoder {
 public:
  // `vocab` must outlive the encoder.
  static absl::StatusOr<std::unique_ptr<SentencePieceEncoder>> Create(const Vocab& vocab);

  // Appends the tokens of `text` (no special-token handling). `prefix_space` adds the
  // leading space (at the start of the input and after special tokens, as llama.cpp does).
  absl::Status Encode(absl::string_view text, bool prefix_space, std::vector<int32_t>& out) const;

  // The bytes token `id` decodes to: U+2581 as a space, <0xNN> as the byte, control tokens
  // as their text.
  const std::string& TokenBytes(int32_t id) const { return token_bytes_[id]; }

 private:
  explicit SentencePieceEncoder(const Vocab& vocab) : vocab_(vocab) {}
  absl::Status Emit(absl::string_view piece, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  std::array<int32_t, 256> byte_token_{};  // <0xNN> tokens, -1 if absent
  std::vector<std::string> token_bytes_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_TOKENIZER_SENTENCE_PIECE_ENCODER_H_
