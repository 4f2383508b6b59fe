// Tokenizer behaviour beyond the reference vectors: SentencePiece against the sentencepiece
// package on a vocabulary the test builds into a GGUF file, special-token handling, BOS,
// decoding, streaming without split characters, UTF-8 helpers, and errors on bad input.
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "nlohmann/json.hpp"
#include "src/runtime/tokenizer/pre_tokenizer.h"
#include "src/runtime/tokenizer/tokenizer_impl.h"
#include "src/runtime/tokenizer/utf8.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

nlohmann::json LoadSpmData() {
  std::ifstream in(std::string(HETERO_TEST_DATA_DIR) + "/spm_vectors.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

// A model file (tiny random weights) carrying the trained SentencePiece vocabulary.
testing::GgufBuilder SpmModelBuilder(const nlohmann::json& data) {
  testing::TinyModelOptions o;
  o.n_vocab = static_cast<int>(data["pieces"].size());
  testing::GgufBuilder b = testing::TinyModelBuilder(o);
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const auto& p : data["pieces"]) {
    tokens.push_back(p[0].get<std::string>());
    scores.push_back(p[1].get<float>());
    types.push_back(p[2].get<int32_t>());
  }
  b.AddSpmVocabulary(tokens, scores, types);
  return b;
}

std::unique_ptr<Tokenizer> SpmTokenizer() {
  static const nlohmann::json* data = new nlohmann::json(LoadSpmData());
  static const Model* model = [] {
    auto m = Model::Load(testing::WriteTempFile(SpmModelBuilder(*data).Build(), "spm_model.gguf"));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? m->release() : nullptr;
  }();
  if (model == nullptr) return nullptr;
  auto t = Tokenizer::Create(*model);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(SentencePieceTest, MatchesTheSentencepiecePackage) {
  const nlohmann::json data = LoadSpmData();
  std::unique_ptr<Tokenizer> tokenizer = SpmTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Describe(), "llama");
  EXPECT_TRUE(tokenizer->add_bos_by_default());
  int failures = 0;
  for (const auto& v : data["vectors"]) {
    const std::string text = v["text"].get<std::string>();
    const std::vector<int32_t> want = v["ids"].get<std::vector<int32_t>>();
    auto ids = tokenizer->Encode(text, false, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids != want && ++failures <= 10) {
      ADD_FAILURE() << "text \"" << absl::CEscape(text) << "\": got " << ::testing::PrintToString(*ids)
                    << " want " << ::testing::PrintToString(want);
    }
    // Round trip, except for U+2581, which SentencePiece reads as its own space marker.
    if (text.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_EQ(*tokenizer->Decode(*ids), text) << absl::CEscape(text);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << data["vectors"].size();
  EXPECT_GE(data["vectors"].size(), 300u);
}

TEST(SentencePieceTest, BosAndSpecialTokens) {
  std::unique_ptr<Tokenizer> tokenizer = SpmTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto plain = tokenizer->Encode("<s>quick", false, false);
  auto parsed = tokenizer->Encode("<s>quick", true, true);
  ASSERT_TRUE(plain.ok() && parsed.ok());
  EXPECT_NE((*plain)[0], 1);
  EXPECT_EQ((*parsed)[0], 1);  // BOS added
  EXPECT_EQ((*parsed)[1], 1);  // "<s>" parsed as BOS
  // After a special token the next word gets the space prefix again (llama.cpp's rule).
  EXPECT_EQ(*tokenizer->Decode(*parsed, /*skip_special=*/true), "quick");
  // Byte fallback decodes to the original bytes.
  EXPECT_EQ(*tokenizer->Decode(*tokenizer->Encode("中文", false, false)), "中文");
}

const Tokenizer* DefaultTokenizer() {
  static const Tokenizer* tokenizer = []() -> const Tokenizer* {
    if (!std::filesystem::exists(kDefaultModelPath)) return nullptr;
    auto model = Model::Load(kDefaultModelPath);
    if (!model.ok()) return nullptr;
    auto t = Tokenizer::Create(**model);
    return t.ok() ? t->release() : nullptr;
  }();
  return tokenizer;
}

#define REQUIRE_DEFAULT_TOKENIZER(t) \
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();  \
  const Tokenizer* t = DefaultTokenizer(); \
  ASSERT_NE(t, nullptr)

TEST(TokenizerTest, DefaultModelBasics) {
  REQUIRE_DEFAULT_TOKENIZER(t);
  EXPECT_EQ(t->vocab_size(), 49152);
  EXPECT_EQ(t->Describe(), "gpt2/smollm");
  EXPECT_EQ(t->bos(), 1);
  EXPECT_EQ(t->eos(), 2);
  EXPECT_FALSE(t->add_bos_by_default());
  EXPECT_EQ(t->FindToken("<|im_end|>"), 2);
  EXPECT_TRUE(t->IsEndOfGeneration(2));
  EXPECT_TRUE(t->IsEndOfGeneration(0));  // <|endoftext|>
  EXPECT_FALSE(t->IsEndOfGeneration(1));
  EXPECT_TRUE(t->IsControl(1));
  EXPECT_EQ(t->TokenText(1), "<|im_start|>");
  EXPECT_EQ(t->TokenText(-1), "");
  EXPECT_EQ(t->TokenText(49152), "");
}

TEST(TokenizerTest, SpecialTokensOnlyWithParseSpecial) {
  REQUIRE_DEFAULT_TOKENIZER(t);
  auto with = t->Encode("<|im_start|>user", false, true);
  auto without = t->Encode("<|im_start|>user", false, false);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(with->front(), 1);
  EXPECT_GT(without->size(), with->size());
  EXPECT_EQ(std::count(without->begin(), without->end(), 1), 0);
  EXPECT_EQ(*t->Decode(*with), "<|im_start|>user");
  EXPECT_EQ(*t->Decode(*without), "<|im_start|>user");
  EXPECT_EQ(*t->Decode(*with, /*skip_special=*/true), "user");
  auto bos = t->Encode("x", true, true);
  ASSERT_TRUE(bos.ok());
  EXPECT_EQ(bos->front(), t->bos());
}

TEST(TokenizerTest, DecodeRejectsBadIds) {
  REQUIRE_DEFAULT_TOKENIZER(t);
  EXPECT_THAT(t->Decode({5, -1}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token id -1")));
  EXPECT_THAT(t->Decode({49152}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the vocabulary")));
}

// Streaming never emits part of a character, whatever the token boundaries.
TEST(TokenizerTest, StreamingNeverSplitsACharacter) {
  REQUIRE_DEFAULT_TOKENIZER(t);
  const std::string text = "Emoji 👨‍👩‍👧‍👦 and 中文 and e\u0301 and 🇫🇷!";
  auto ids = t->Encode(text, false, false);
  ASSERT_TRUE(ids.ok());
  StreamingDetokenizer stream(*t);
  std::string joined;
  int held_back = 0;
  for (int32_t id : *ids) {
    auto piece = stream.Push(id);
    ASSERT_TRUE(piece.ok());
    EXPECT_TRUE(IsValidUtf8(*piece)) << absl::CEscape(*piece);
    if (t->impl().TokenBytes(id).size() != piece->size()) ++held_back;
    joined += *piece;
  }
  joined += stream.Flush();
  EXPECT_EQ(joined, text);
  EXPECT_GT(held_back, 0) << "the text should exercise tokens that end inside a character";
}

TEST(TokenizerTest, StreamingReplacesBytesThatNeverComplete) {
  REQUIRE_DEFAULT_TOKENIZER(t);
  // 0xC3 alone can never complete once 'b' follows; the euro sign's first two bytes can.
  auto ids = t->Encode("a\xc3" "b\xe2\x82", false, false);
  ASSERT_TRUE(ids.ok());
  StreamingDetokenizer stream(*t);
  std::string out;
  for (int32_t id : *ids) out += *stream.Push(id);
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b");  // the truncated euro sign is still held
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD");
  EXPECT_THAT(stream.Push(-5), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Utf8Test, SequenceLengths) {
  EXPECT_EQ(ValidUtf8SequenceLength("a"), 1u);
  EXPECT_EQ(ValidUtf8SequenceLength("\xc3\xa9"), 2u);
  EXPECT_EQ(ValidUtf8SequenceLength("\xe2\x82\xac"), 3u);
  EXPECT_EQ(ValidUtf8SequenceLength("\xf0\x9f\x98\x80"), 4u);
  EXPECT_EQ(ValidUtf8SequenceLength("\xc0\xaf"), 0u);          // overlong
  EXPECT_EQ(ValidUtf8SequenceLength("\xe0\x80\xaf"), 0u);      // overlong
  EXPECT_EQ(ValidUtf8SequenceLength("\xed\xa0\x80"), 0u);      // surrogate
  EXPECT_EQ(ValidUtf8SequenceLength("\xf4\x90\x80\x80"), 0u);  // > U+10FFFF
  EXPECT_EQ(ValidUtf8SequenceLength("\x80"), 0u);
  EXPECT_EQ(ValidUtf8SequenceLength("\xe2\x82"), 0u);          // truncated
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xe2\x82"), 2u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xf0"), 1u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xe2\x82\xac"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xed\xa0"), 0u);           // can never complete
  EXPECT_EQ(IncompleteUtf8Suffix("\xff"), 0u);
  auto segments = SplitValidUtf8("ok\xff\xc3\xa9\x80");
  ASSERT_EQ(segments.size(), 4u);
  EXPECT_EQ(segments[0].bytes, "ok");
  EXPECT_FALSE(segments[1].valid);
  EXPECT_EQ(segments[2].bytes, "\xc3\xa9");
  EXPECT_FALSE(segments[3].valid);
  auto lossy = [](absl::string_view in) {
    std::string out;
    AppendUtf8Lossy(in, out);
    return out;
  };
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("ok"), "ok");
  EXPECT_EQ(lossy("\xe2\x82x"), r + "x");         // one replacement per maximal subpart
  EXPECT_EQ(lossy("\xf0\x9f\x98"), r);
  EXPECT_EQ(lossy("\xc0\xaf"), r + r);            // C0 can start nothing
  EXPECT_EQ(lossy("\xed\xa0\x80"), r + r + r);     // surrogates are not characters
  EXPECT_EQ(lossy("a\xff" "b"), "a" + r + "b");
  // Every code point round-trips through AppendUtf8.
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x800 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    AppendUtf8(cp, s);
    ASSERT_EQ(ValidUtf8SequenceLength(s), s.size()) << cp;
  }
}

TEST(PreTokenizerTest, UnknownNameIsAnError) {
  EXPECT_THAT(PreTokenizer::Create("tekken"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("pre-tokenizer 'tekken'")));
  EXPECT_THAT(PreTokenizer::FromPatterns("bad", {"(unclosed"}, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not compile")));
}

TEST(PreTokenizerTest, EmptyMatchesNeitherLoseNorRepeatText) {
  auto pre = PreTokenizer::FromPatterns("test", {"x*"}, false);
  ASSERT_TRUE(pre.ok());
  std::vector<absl::string_view> pieces;
  ASSERT_TRUE((*pre)->Split("abxc", pieces).ok());
  std::string joined;
  for (absl::string_view p : pieces) joined += std::string(p);
  EXPECT_EQ(joined, "abxc");
}

TEST(PreTokenizerTest, UnicodeClassesCoverAllScripts) {
  auto pre = PreTokenizer::Create("gpt-2");
  ASSERT_TRUE(pre.ok());
  std::vector<absl::string_view> pieces;
  ASSERT_TRUE((*pre)->Split("Привет мир 123 中文 𝕳𝖊 नमस्ते", pieces).ok());
  // Devanagari's virama and vowel signs are marks (\p{M}), not letters, so GPT-2's
  // expression splits around them, as the reference does.
  EXPECT_THAT(pieces, ElementsAre("Привет", " мир", " 123", " 中文", " 𝕳𝖊", " नमस", "्", "त", "े"));
  pieces.clear();
  // A very long run of whitespace stays one piece (and needs no deep regex stack).
  const std::string spaces(200000, ' ');
  ASSERT_TRUE((*pre)->Split(spaces + "x", pieces).ok());
  EXPECT_EQ(pieces.size(), 2u);
}

// Vocabularies that must be rejected with a message naming the problem.
TEST(VocabTest, RejectsBadVocabularies) {
  auto load = [](testing::GgufBuilder b) {
    auto file = GgufFile::Parse(b.Build());
    EXPECT_TRUE(file.ok());
    return file.ok() ? Tokenizer::Impl::FromGguf(**file).status() : file.status();
  };
  // Parse() views bytes that Build() returned by value: keep them alive per call.
  auto load_kept = [](const testing::GgufBuilder& b) {
    static std::vector<std::vector<uint8_t>>* keep = new std::vector<std::vector<uint8_t>>();
    keep->push_back(b.Build());
    auto file = GgufFile::Parse(keep->back());
    EXPECT_TRUE(file.ok());
    return file.ok() ? Tokenizer::Impl::FromGguf(**file).status() : file.status();
  };
  (void)load;
  testing::GgufBuilder no_model;
  EXPECT_THAT(load_kept(no_model), StatusIs(absl::StatusCode::kNotFound, HasSubstr("tokenizer.ggml.model")));
  testing::GgufBuilder bert;
  bert.AddString("tokenizer.ggml.model", "bert");
  EXPECT_THAT(load_kept(bert), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("'bert' is not supported")));
  testing::GgufBuilder bad_pre;
  bad_pre.AddString("tokenizer.ggml.model", "gpt2").AddString("tokenizer.ggml.pre", "mystery");
  bad_pre.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "ab"}).AddStringArray("tokenizer.ggml.merges", {"a b"});
  EXPECT_THAT(load_kept(bad_pre), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("pre-tokenizer 'mystery'")));
  testing::GgufBuilder bad_merge;
  bad_merge.AddString("tokenizer.ggml.model", "gpt2").AddString("tokenizer.ggml.pre", "gpt-2");
  bad_merge.AddStringArray("tokenizer.ggml.tokens", {"a", "b"}).AddStringArray("tokenizer.ggml.merges", {"a b"});
  EXPECT_THAT(load_kept(bad_merge), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("merge 0 'a b'")));
  testing::GgufBuilder bad_id;
  bad_id.AddString("tokenizer.ggml.model", "gpt2").AddString("tokenizer.ggml.pre", "gpt-2");
  bad_id.AddStringArray("tokenizer.ggml.tokens", {"a"}).AddStringArray("tokenizer.ggml.merges", {});
  bad_id.AddUint32("tokenizer.ggml.eos_token_id", 7);
  EXPECT_THAT(load_kept(bad_id), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("eos_token_id is 7")));
  testing::GgufBuilder bad_types;
  bad_types.AddString("tokenizer.ggml.model", "gpt2").AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
  bad_types.AddInt32Array("tokenizer.ggml.token_type", {1});
  EXPECT_THAT(load_kept(bad_types), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token_type has 1 entries")));
  testing::GgufBuilder spm_no_scores;
  spm_no_scores.AddString("tokenizer.ggml.model", "llama").AddStringArray("tokenizer.ggml.tokens", {"a"});
  EXPECT_THAT(load_kept(spm_no_scores), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs tokenizer.ggml.scores")));
  testing::GgufBuilder bad_byte;
  bad_byte.AddString("tokenizer.ggml.model", "llama").AddStringArray("tokenizer.ggml.tokens", {"<0xZZ>"});
  bad_byte.AddFloat32Array("tokenizer.ggml.scores", {0}).AddInt32Array("tokenizer.ggml.token_type", {6});
  EXPECT_THAT(load_kept(bad_byte), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not of the form <0xNN>")));
}

// Merging never builds a control, unknown or byte token out of plain text, and a piece
// with a byte that has no token becomes <unk> as a whole.
TEST(SentencePieceTest, MergesOnlyIntoOrdinaryPieces) {
  testing::GgufBuilder b;
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<", "s", ">", "<s", "x", "\xE2\x96\x81", "\xE2\x96\x81x", "<0xE4>"};
  std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6};
  b.AddString("tokenizer.ggml.model", "llama").AddStringArray("tokenizer.ggml.tokens", tokens);
  b.AddFloat32Array("tokenizer.ggml.scores", std::vector<float>(tokens.size(), -1.0f));
  b.AddInt32Array("tokenizer.ggml.token_type", types);
  b.AddUint32("tokenizer.ggml.unknown_token_id", 0);
  const std::vector<uint8_t> bytes = b.Build();
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok());
  auto impl = Tokenizer::Impl::FromGguf(**file);
  ASSERT_TRUE(impl.ok()) << impl.status();
  std::vector<int32_t> ids;
  ASSERT_TRUE((*impl)->Encode("x<s>x", false, false, ids).ok());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0) << ::testing::PrintToString(ids);
  ids.clear();
  ASSERT_TRUE((*impl)->Encode("\xE4\xB8\xAD", false, false, ids).ok());  // only 0xE4 has a byte token
  EXPECT_THAT(ids, ElementsAre(8, 0));
}

TEST(TokenizerTest, LongestSpecialTokenWinsAmongManyLengths) {
  testing::GgufBuilder b;
  b.AddString("tokenizer.ggml.model", "gpt2").AddString("tokenizer.ggml.pre", "gpt-2");
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int c = 0; c < 256; ++c) {  // every byte character, so plain text always encodes
    std::string s;
    const int cp = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE) ? c : -1;
    if (cp < 0) continue;
    AppendUtf8(static_cast<uint32_t>(cp), s);
    tokens.push_back(s);
    types.push_back(1);
  }
  for (const char* special : {"<a>", "<ab>", "<abc>", "<abcd>", "<a"}) {
    tokens.push_back(special);
    types.push_back(3);
  }
  b.AddStringArray("tokenizer.ggml.tokens", tokens).AddStringArray("tokenizer.ggml.merges", {});
  b.AddInt32Array("tokenizer.ggml.token_type", types);
  const std::vector<uint8_t> bytes = b.Build();
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok());
  auto impl = Tokenizer::Impl::FromGguf(**file);
  ASSERT_TRUE(impl.ok()) << impl.status();
  const int32_t base = static_cast<int32_t>(tokens.size()) - 5;
  auto fragments = (*impl)->SplitSpecials("<abc><ab><a><abcd><a", true);
  std::vector<int32_t> ids;
  for (const auto& f : fragments) ids.push_back(f.token);
  EXPECT_THAT(ids, ElementsAre(base + 2, base + 1, base + 0, base + 3, base + 4));
  EXPECT_EQ((*impl)->SplitSpecials("<abc>", false).size(), 1u);  // control: text without parse_special
}

TEST(VocabTest, TokenizerLargerThanTheModelIsRejected) {
  testing::TinyModelOptions o;
  o.n_vocab = 2;
  testing::GgufBuilder b = testing::TinyModelBuilder(o);
  b.AddString("tokenizer.ggml.model", "gpt2").AddString("tokenizer.ggml.pre", "gpt-2");
  b.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c"}).AddStringArray("tokenizer.ggml.merges", {});
  auto model = Model::Load(testing::WriteTempFile(b.Build(), "vocab_too_big.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(Tokenizer::Create(**model),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 tokens but the model embeds only 2")));
}

}  // namespace
}  // namespace hetero
