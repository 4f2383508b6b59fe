// The vocabulary a GGUF file carries under tokenizer.ggml.*: tokens, their types and
// scores, merges, special token ids and flags. Validated on load; shared by the
// byte-level BPE and SentencePiece tokenizers.
#ifndef HETERO_RUNTIME_TOKENIZER_VOCAB_H_
#define HETERO_RUNTIME_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/runtime/gguf.h"

namespace hetero {

// tokenizer.ggml.token_type values (llama.cpp's token types; part of the file format).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special: BOS, EOS, <|im_start|>, ...; text only with parse_special
  kUserDefined = 4,  // added tokens always matched as whole tokens
  kUnused = 5,
  kByte = 6,         // SentencePiece byte fallback <0xNN>
};

enum class TokenizerModel {
  kBytePair,       // tokenizer.ggml.model = "gpt2": byte-level BPE with merges
  kSentencePiece,  // tokenizer.ggml.model = "llama": SentencePiece BPE with scores
};

struct Vocab {
  TokenizerModel model = TokenizerModel::kBytePair;
  std::string pre;  // tokenizer.ggml.pre, empty when absent
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<float> scores;  // empty unless present
  std::vector<std::pair<std::string, std::string>> merges;  // byte-level BPE, by rank
  absl::flat_hash_map<std::string, int32_t> token_to_id;
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t eot = -1;  // end of turn, when the model has one distinct from EOS
  int32_t unk = -1;
  int32_t pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  int32_t Find(absl::string_view token) const {
    auto it = token_to_id.find(token);
    return it == token_to_id.end() ? -1 : it->second;
  }
};

// Reads and checks tokenizer.ggml.*: every array agrees in length with the token list,
// special ids are in range, and the model type is supported. Errors name the key.
absl::StatusOr<Vocab> ReadVocab(const GgufFile& file);

}  // namespace hetero

#endif  // HETERO_RUNTIME_TOKENIZER_VOCAB_H_
