#include "hetero/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "hetero/model.h"
#include "src/runtime/log_internal.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/tokenizer/byte_pair_encoder.h"
#include "src/runtime/tokenizer/sentence_piece_encoder.h"
#include "src/runtime/tokenizer/tokenizer_impl.h"
#include "src/runtime/tokenizer/utf8.h"

namespace hetero {

absl::StatusOr<std::unique_ptr<Tokenizer::Impl>> Tokenizer::Impl::FromGguf(const GgufFile& file) {
  auto impl = std::make_unique<Impl>();
  HETERO_ASSIGN_OR_RETURN(impl->vocab, ReadVocab(file));
  const Vocab& v = impl->vocab;
  if (v.model == TokenizerModel::kBytePair) {
    if (v.pre.empty()) {
      internal::Log(LogLevel::kWarning,
                    absl::StrCat("tokenizer in '", file.source_name(),
                                 "': no tokenizer.ggml.pre; using the 'default' pre-tokenizer"));
    }
    HETERO_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> pre, PreTokenizer::Create(v.pre));
    HETERO_ASSIGN_OR_RETURN(impl->bpe, BytePairEncoder::Create(v, std::move(pre)));
  } else {
    HETERO_ASSIGN_OR_RETURN(impl->spm, SentencePieceEncoder::Create(v));
  }
  // Tokens matched as wholes: control and unknown ones only with parse_special,
  // user-defined ones always. Longest first, so the longest match wins at a position.
  for (int32_t id = 0; id < v.size(); ++id) {
    const TokenType t = v.types[id];
    const bool control = t == TokenType::kControl || t == TokenType::kUnknown;
    if ((control || t == TokenType::kUserDefined) && !v.tokens[id].empty()) {
      impl->specials.push_back({v.tokens[id], id, !control});
    }
  }
  for (const SpecialToken& s : impl->specials) {
    impl->special_first_bytes.set(static_cast<uint8_t>(s.text[0]));
    auto group = std::find_if(impl->specials_by_length.begin(), impl->specials_by_length.end(),
                              [&](const SpecialsOfLength& g) { return g.length == s.text.size(); });
    if (group == impl->specials_by_length.end()) {
      impl->specials_by_length.push_back({s.text.size(), {}});
      group = impl->specials_by_length.end() - 1;
    }
    group->by_text.emplace(s.text, &s);  // the first id with a given text wins
  }
  std::sort(impl->specials_by_length.begin(), impl->specials_by_length.end(),
            [](const SpecialsOfLength& a, const SpecialsOfLength& b) { return a.length > b.length; });
  // Turn-ending control tokens besides EOS/EOT, as chat models use them.
  for (const char* name : {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"}) {
    const int32_t id = v.Find(name);
    if (id >= 0 && v.types[id] == TokenType::kControl) impl->end_of_generation.push_back(id);
  }
  return impl;
}

std::vector<Tokenizer::Impl::Fragment> Tokenizer::Impl::SplitSpecials(absl::string_view text,
                                                                      bool parse_special) const {
  std::vector<Fragment> out;
  size_t text_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!special_first_bytes.test(static_cast<uint8_t>(text[i]))) {
      ++i;
      continue;
    }
    const SpecialToken* match = nullptr;
    for (const SpecialsOfLength& group : specials_by_length) {  // longest first
      if (group.length > text.size() - i) continue;
      auto it = group.by_text.find(text.substr(i, group.length));
      if (it != group.by_text.end() && (parse_special || it->second->always)) {
        match = it->second;
        break;
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    if (i > text_start) out.push_back({text.substr(text_start, i - text_start), -1});
    out.push_back({absl::string_view(), match->id});
    i += match->text.size();
    text_start = i;
  }
  if (text_start < text.size()) out.push_back({text.substr(text_start), -1});
  return out;
}

absl::Status Tokenizer::Impl::Encode(absl::string_view text, bool add_bos, bool parse_special,
                                     std::vector<int32_t>& out) const {
  if (add_bos) {
    if (vocab.bos < 0) return absl::FailedPreconditionError("tokenizer: BOS requested but the model has no BOS token");
    out.push_back(vocab.bos);
  }
  bool after_special = true;  // SentencePiece prefixes a space at the start and after specials
  for (const Fragment& f : SplitSpecials(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    absl::Status s = bpe != nullptr ? bpe->Encode(f.text, out)
                                    : spm->Encode(f.text, vocab.add_space_prefix && after_special, out);
    if (!s.ok()) return s;
    after_special = false;
  }
  return absl::OkStatus();
}

const std::string& Tokenizer::Impl::TokenBytes(int32_t id) const {
  return bpe != nullptr ? bpe->TokenBytes(id) : spm->TokenBytes(id);
}

bool Tokenizer::Impl::IsSkippable(int32_t id) const {
  const TokenType t = vocab.types[id];
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

bool Tokenizer::Impl::StripsLeadingSpace(int32_t id) const {
  return spm != nullptr && vocab.add_space_prefix && vocab.types[id] != TokenType::kControl &&
         vocab.types[id] != TokenType::kUserDefined;
}

// ---- Tokenizer ----------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(const Model& model) {
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, Impl::FromGguf(*model.impl().gguf));
  if (impl->vocab.size() > model.config().n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer in '", model.path(), "' has ",
                                                   impl->vocab.size(), " tokens but the model embeds only ",
                                                   model.config().n_vocab));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_bos,
                                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  HETERO_RETURN_IF_ERROR(impl_->Encode(absl::string_view(text.data(), text.size()), add_bos, parse_special, out));
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= impl_->vocab.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary (0..", impl_->vocab.size() - 1, ")"));
    }
    if (skip_special && impl_->IsSkippable(id)) continue;
    absl::string_view bytes = impl_->TokenBytes(id);
    if (at_start && impl_->StripsLeadingSpace(id) && !bytes.empty() && bytes[0] == ' ') bytes.remove_prefix(1);
    if (impl_->vocab.types[id] != TokenType::kControl) at_start = false;
    out.append(bytes.data(), bytes.size());
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab.size(); }
int32_t Tokenizer::bos() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos() const { return impl_->vocab.eos; }
int32_t Tokenizer::eot() const { return impl_->vocab.eot; }
bool Tokenizer::add_bos_by_default() const { return impl_->vocab.add_bos; }

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  if (id < 0) return false;
  if (id == impl_->vocab.eos || id == impl_->vocab.eot) return true;
  return std::find(impl_->end_of_generation.begin(), impl_->end_of_generation.end(), id) !=
         impl_->end_of_generation.end();
}

bool Tokenizer::IsControl(int32_t id) const {
  return id >= 0 && id < impl_->vocab.size() && impl_->vocab.types[id] == TokenType::kControl;
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= impl_->vocab.size()) return {};
  return impl_->vocab.tokens[id];
}

int32_t Tokenizer::FindToken(std::string_view text) const {
  return impl_->vocab.Find(absl::string_view(text.data(), text.size()));
}

std::string Tokenizer::Describe() const {
  if (impl_->bpe != nullptr) return absl::StrCat("gpt2/", impl_->bpe->pre_tokenizer().name());
  return "llama";
}

// ---- StreamingDetokenizer -----------------------------------------------------------------

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

absl::StatusOr<std::string> StreamingDetokenizer::Push(int32_t id) {
  const Tokenizer::Impl& impl = tokenizer_.impl();
  if (id < 0 || id >= impl.vocab.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token id ", id, " is outside the vocabulary (0..", impl.vocab.size() - 1, ")"));
  }
  if (skip_special_ && impl.IsSkippable(id)) return std::string();
  absl::string_view bytes = impl.TokenBytes(id);
  if (at_start_ && impl.StripsLeadingSpace(id) && !bytes.empty() && bytes[0] == ' ') bytes.remove_prefix(1);
  if (impl.vocab.types[id] != TokenType::kControl) at_start_ = false;
  pending_.append(bytes.data(), bytes.size());

  // Emit every complete character; hold an unfinished one at the end; replace bytes that
  // can never become a character with U+FFFD.
  const size_t hold = IncompleteUtf8Suffix(pending_);
  const absl::string_view ready = absl::string_view(pending_).substr(0, pending_.size() - hold);
  std::string out;
  out.reserve(ready.size());
  AppendUtf8Lossy(ready, out);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out;
  AppendUtf8Lossy(pending_, out);
  pending_.clear();
  at_start_ = true;
  return out;
}

}  // namespace hetero
