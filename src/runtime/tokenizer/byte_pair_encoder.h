// Byte-level BPE (GPT-2 style, tokenizer.ggml.model = "gpt2"): text is pre-tokenized, each
// piece's bytes are mapped to the 256 "byte characters", and merges are applied lowest rank
// first (leftmost on ties), as Hugging Face tokenizers does.
#ifndef HETERO_RUNTIME_TOKENIZER_BYTE_PAIR_ENCODER_H_
#define HETERO_RUNTIME_TOKENIZER_BYTE_PAIR_ENCODER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/runtime/tokenizer/pre_tokenizer.h"
#include "src/runtime/tokenizer/vocab.h"

namespace hetero {

class BytePairEncoder {
 public:
  // `vocab` must outlive the encoder.
  static absl::StatusOr<std::unique_ptr<BytePairEncoder>> Create(const Vocab& vocab,
                                                                 std::unique_ptr<PreTokenizer> pre);

  // Appends the tokens of `text` (no special-token handling). Valid UTF-8 runs are
  // pre-tokenized; stray invalid bytes become their byte tokens, so any input round-trips.
  absl::Status Encode(absl::string_view text, std::vector<int32_t>& out) const;

  // The bytes token `id` stands for: byte characters mapped back for ordinary tokens, the
  // text itself for control and user-defined tokens.
  const std::string& TokenBytes(int32_t id) const { return token_bytes_[id]; }

  // Whether the vocabulary has a token for `byte`; bytes without one are dropped.
  bool CanRepresent(uint8_t byte) const { return byte_token_[byte] >= 0; }

  const PreTokenizer& pre_tokenizer() const { return *pre_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  BytePairEncoder(const Vocab& vocab, std::unique_ptr<PreTokenizer> pre) : vocab_(vocab), pre_(std::move(pre)) {}
  absl::Status EncodePiece(absl::string_view piece, std::vector<int32_t>& out) const;
  const Merge* FindMerge(int32_t left, int32_t right) const {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  const Vocab& vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_token_{};      // token of each byte's character, -1 if none
  std::array<std::string, 256> byte_char_;     // UTF-8 of each byte's character
  std::vector<std::string> token_bytes_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_TOKENIZER_BYTE_PAIR_ENCODER_H_
