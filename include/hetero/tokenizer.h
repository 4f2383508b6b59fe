// Tokenizers built from a GGUF model's own vocabulary (tokenizer.ggml.*): byte-level BPE
// (GPT-2 style: SmolLM2, Llama 3, Qwen2) and SentencePiece BPE (Llama 2, TinyLlama).
// Token ids match llama.cpp and Hugging Face for the same model.
#ifndef HETERO_TOKENIZER_H_
#define HETERO_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "hetero/export.h"

namespace hetero {

class Model;

// Immutable once created; every method is thread-safe.
class HETERO_EXPORT Tokenizer {
 public:
  // Reads and validates the vocabulary, merges/scores and special tokens of `model`.
  // The tokenizer copies what it needs and does not keep `model` alive or referenced.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const Model& model);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (any bytes; invalid UTF-8 bytes become byte tokens). `add_bos`
  // prepends the BOS token (an error if the model has none). With `parse_special`, the
  // text of control tokens such as "<|im_start|>" is matched as those tokens; without it,
  // it is tokenized as plain text. User-defined (added) tokens always match.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos,
                                              bool parse_special) const;

  // The bytes `ids` stand for. Control tokens render as their text unless `skip_special`.
  // For SentencePiece vocabularies the space added in front of the text is removed.
  // Decode(Encode(s)) == s when no special token matched inside s and every byte of s has
  // a token (see docs/TOKENIZATION.md for the exceptions).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, bool skip_special = false) const;

  int32_t vocab_size() const;
  int32_t bos() const;  // -1 when the model has none
  int32_t eos() const;
  int32_t eot() const;  // end of turn, -1 when none
  // Whether the model asks for BOS to be added (tokenizer.ggml.add_bos_token).
  bool add_bos_by_default() const;
  // EOS, EOT, or another control token that ends a turn (e.g. <|im_end|>).
  bool IsEndOfGeneration(int32_t id) const;
  bool IsControl(int32_t id) const;
  // The vocabulary entry as stored in the file (e.g. "Ġthe"), empty for a bad id.
  std::string_view TokenText(int32_t id) const;
  // The id whose vocabulary text is `text`, or -1.
  int32_t FindToken(std::string_view text) const;
  // "gpt2/smollm", "llama", ...: the tokenizer model and pre-tokenizer in use.
  std::string Describe() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text that never ends inside a UTF-8 character: bytes of
// an incomplete character are held until the token completing it arrives. Bytes that can
// never form a character are emitted as U+FFFD. One instance per stream; not thread-safe.
class HETERO_EXPORT StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = false);

  // Text that became complete with token `id` (possibly empty).
  absl::StatusOr<std::string> Push(int32_t id);
  // Whatever is still held (an incomplete character, as U+FFFD); the stream restarts.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace hetero

#endif  // HETERO_TOKENIZER_H_
