#include "src/runtime/tokenizer/vocab.h"

#include "absl/strings/str_cat.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

absl::Status VocabError(const GgufFile& file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer in '", file.source_name(), "': ", what));
}

// An optional token id: absent gives -1; present must be a valid id.
absl::StatusOr<int32_t> OptionalTokenId(const GgufFile& file, const std::string& key, int32_t n_tokens) {
  const GgufValue* value = file.FindValue(key);
  if (value == nullptr) return -1;
  absl::StatusOr<int64_t> id = value->ToInt64();
  if (!id.ok()) return VocabError(file, absl::StrCat(key, " ", id.status().message()));
  // Some converters write -1 (or 0xFFFFFFFF) for "none".
  if (*id == -1 || *id == 0xFFFFFFFFll) return -1;
  if (*id < 0 || *id >= n_tokens) {
    return VocabError(file, absl::StrCat(key, " is ", *id, ", outside the ", n_tokens, "-token vocabulary"));
  }
  return static_cast<int32_t>(*id);
}

absl::StatusOr<bool> OptionalBool(const GgufFile& file, const std::string& key, bool fallback) {
  if (file.FindValue(key) == nullptr) return fallback;
  return file.GetBool(key);
}

}  // namespace

absl::StatusOr<Vocab> ReadVocab(const GgufFile& file) {
  Vocab v;
  HETERO_ASSIGN_OR_RETURN(absl::string_view model, file.GetString("tokenizer.ggml.model"));
  if (model == "gpt2") {
    v.model = TokenizerModel::kBytePair;
  } else if (model == "llama") {
    v.model = TokenizerModel::kSentencePiece;
  } else {
    return absl::UnimplementedError(absl::StrCat("tokenizer in '", file.source_name(),
                                                 "': tokenizer.ggml.model '", PrintableName(model),
                                                 "' is not supported (supported: gpt2, llama)"));
  }
  if (const GgufValue* pre = file.FindValue("tokenizer.ggml.pre"); pre != nullptr) {
    HETERO_ASSIGN_OR_RETURN(absl::string_view p, file.GetString("tokenizer.ggml.pre"));
    v.pre = std::string(p);
  }

  HETERO_ASSIGN_OR_RETURN(const GgufArray* tokens, file.GetArray("tokenizer.ggml.tokens"));
  if (tokens->element_type != GgufValueType::kString) {
    return VocabError(file, "tokenizer.ggml.tokens is not an array of strings");
  }
  if (tokens->size == 0 || tokens->size > (uint64_t{1} << 31) - 1) {
    return VocabError(file, absl::StrCat("tokenizer.ggml.tokens has ", tokens->size, " entries"));
  }
  const auto n = static_cast<int32_t>(tokens->size);
  v.tokens.reserve(n);
  v.token_to_id.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    v.tokens.emplace_back(tokens->strings[i]);
    // Duplicates exist in some real vocabularies; the first id wins, as in llama.cpp.
    v.token_to_id.emplace(v.tokens.back(), i);
  }

  v.types.assign(n, TokenType::kNormal);
  if (file.FindValue("tokenizer.ggml.token_type") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(const GgufArray* types, file.GetArray("tokenizer.ggml.token_type"));
    if (types->element_type != GgufValueType::kInt32 && types->element_type != GgufValueType::kUint32) {
      return VocabError(file, "tokenizer.ggml.token_type is not an array of 32-bit integers");
    }
    if (types->size != tokens->size) {
      return VocabError(file, absl::StrCat("tokenizer.ggml.token_type has ", types->size,
                                           " entries for ", n, " tokens"));
    }
    for (int32_t i = 0; i < n; ++i) {
      const int32_t t = types->Get<int32_t>(i);
      if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
        return VocabError(file, absl::StrCat("token ", i, " has unknown token type ", t));
      }
      v.types[i] = static_cast<TokenType>(t);
    }
  }

  if (file.FindValue("tokenizer.ggml.scores") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(const GgufArray* scores, file.GetArray("tokenizer.ggml.scores"));
    if (scores->element_type != GgufValueType::kFloat32 || scores->size != tokens->size) {
      return VocabError(file, absl::StrCat("tokenizer.ggml.scores must be ", n, " float32 values"));
    }
    v.scores.resize(n);
    for (int32_t i = 0; i < n; ++i) v.scores[i] = scores->Get<float>(i);
  } else if (v.model == TokenizerModel::kSentencePiece) {
    return VocabError(file, "a SentencePiece (llama) vocabulary needs tokenizer.ggml.scores");
  }

  if (v.model == TokenizerModel::kBytePair) {
    HETERO_ASSIGN_OR_RETURN(const GgufArray* merges, file.GetArray("tokenizer.ggml.merges"));
    if (merges->element_type != GgufValueType::kString) {
      return VocabError(file, "tokenizer.ggml.merges is not an array of strings");
    }
    v.merges.reserve(merges->size);
    for (uint64_t i = 0; i < merges->size; ++i) {
      absl::string_view m = merges->strings[i];
      // "left right"; a part may itself start with a space in exotic vocabularies, so the
      // separator is the first space after the first byte.
      const size_t space = m.size() > 1 ? m.find(' ', 1) : absl::string_view::npos;
      if (space == absl::string_view::npos) {
        return VocabError(file, absl::StrCat("merge ", i, " '", PrintableName(m), "' has no separating space"));
      }
      v.merges.emplace_back(std::string(m.substr(0, space)), std::string(m.substr(space + 1)));
    }
  }

  HETERO_ASSIGN_OR_RETURN(v.bos, OptionalTokenId(file, "tokenizer.ggml.bos_token_id", n));
  HETERO_ASSIGN_OR_RETURN(v.eos, OptionalTokenId(file, "tokenizer.ggml.eos_token_id", n));
  HETERO_ASSIGN_OR_RETURN(v.eot, OptionalTokenId(file, "tokenizer.ggml.eot_token_id", n));
  HETERO_ASSIGN_OR_RETURN(v.unk, OptionalTokenId(file, "tokenizer.ggml.unknown_token_id", n));
  HETERO_ASSIGN_OR_RETURN(v.pad, OptionalTokenId(file, "tokenizer.ggml.padding_token_id", n));
  const bool spm = v.model == TokenizerModel::kSentencePiece;
  HETERO_ASSIGN_OR_RETURN(v.add_bos, OptionalBool(file, "tokenizer.ggml.add_bos_token", spm));
  HETERO_ASSIGN_OR_RETURN(v.add_eos, OptionalBool(file, "tokenizer.ggml.add_eos_token", false));
  HETERO_ASSIGN_OR_RETURN(v.add_space_prefix, OptionalBool(file, "tokenizer.ggml.add_space_prefix", spm));
  return v;
}

}  // namespace hetero
