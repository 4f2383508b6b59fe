// Library-internal state of hetero::Tokenizer.
#ifndef HETERO_RUNTIME_TOKENIZER_TOKENIZER_IMPL_H_
#define HETERO_RUNTIME_TOKENIZER_TOKENIZER_IMPL_H_

#include <bitset>

#include "absl/container/flat_hash_map.h"
#include <memory>
#include <string>
#include <vector>

#include "hetero/tokenizer.h"
#include "src/runtime/gguf.h"
#include "src/runtime/tokenizer/byte_pair_encoder.h"
#include "src/runtime/tokenizer/sentence_piece_encoder.h"
#include "src/runtime/tokenizer/vocab.h"

namespace hetero {

struct SpecialToken {
  std::string text;
  int32_t id;
  bool always;  // user-defined: matched even without parse_special
};

struct Tokenizer::Impl {
  static absl::StatusOr<std::unique_ptr<Impl>> FromGguf(const GgufFile& file);

  // Text split into plain-text fragments and whole special tokens.
  struct Fragment {
    absl::string_view text;
    int32_t token;  // -1 for text
  };
  std::vector<Fragment> SplitSpecials(absl::string_view text, bool parse_special) const;
  absl::Status Encode(absl::string_view text, bool add_bos, bool parse_special, std::vector<int32_t>& out) const;
  const std::string& TokenBytes(int32_t id) const;
  bool IsSkippable(int32_t id) const;
  // SentencePiece: the first text token's leading space is the prefix Encode added.
  bool StripsLeadingSpace(int32_t id) const;

  Vocab vocab;
  std::unique_ptr<BytePairEncoder> bpe;       // exactly one of these two
  std::unique_ptr<SentencePieceEncoder> spm;
  std::vector<SpecialToken> specials;
  // Special tokens by text length, longest first, each with a hash index, so a position is
  // tested with one look-up per distinct length (not one compare per special token).
  struct SpecialsOfLength {
    size_t length;
    absl::flat_hash_map<absl::string_view, const SpecialToken*> by_text;
  };
  std::vector<SpecialsOfLength> specials_by_length;
  std::bitset<256> special_first_bytes;
  std::vector<int32_t> end_of_generation;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_TOKENIZER_TOKENIZER_IMPL_H_
