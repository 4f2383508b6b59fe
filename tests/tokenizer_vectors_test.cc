// Byte-level BPE against Hugging Face `tokenizers` (tests/data/tokenizer_vectors.jsonl,
// made by scripts/gen_tokenizer_vectors.py): the default model's vocabulary under each
// supported pre-tokenizer, with and without special-token parsing, including invalid UTF-8.
// Every vector must match exactly, and Decode(Encode(s)) == s.
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "nlohmann/json.hpp"
#include "src/runtime/gguf.h"
#include "src/runtime/tokenizer/tokenizer_impl.h"
#include "src/runtime/tokenizer/utf8.h"
#include "tests/support/default_model.h"
#include "tests/support/gguf_builder.h"

namespace hetero {
namespace {

struct Vector {
  std::string text;
  bool parse_special;
  std::vector<int32_t> ids;
};

std::map<std::string, std::vector<Vector>> LoadVectors() {
  std::ifstream in(std::string(HETERO_TEST_DATA_DIR) + "/tokenizer_vectors.jsonl");
  EXPECT_TRUE(in.good());
  std::map<std::string, std::vector<Vector>> by_pre;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    Vector v;
    v.text = absl::HexStringToBytes(j["text_hex"].get<std::string>());
    v.parse_special = j["parse_special"].get<bool>();
    v.ids = j["ids"].get<std::vector<int32_t>>();
    by_pre[j["pre"].get<std::string>()].push_back(std::move(v));
  }
  return by_pre;
}

// The default model's tokenizer metadata, rewritten with another pre-tokenizer name.
std::unique_ptr<GgufFile> VocabularyWithPre(const GgufFile& model, const std::string& pre) {
  testing::GgufBuilder b;
  b.AddString("tokenizer.ggml.model", "gpt2");
  b.AddString("tokenizer.ggml.pre", pre);
  const GgufArray* tokens = *model.GetArray("tokenizer.ggml.tokens");
  b.AddStringArray("tokenizer.ggml.tokens", std::vector<std::string>(tokens->strings.begin(), tokens->strings.end()));
  const GgufArray* merges = *model.GetArray("tokenizer.ggml.merges");
  b.AddStringArray("tokenizer.ggml.merges", std::vector<std::string>(merges->strings.begin(), merges->strings.end()));
  const GgufArray* types = *model.GetArray("tokenizer.ggml.token_type");
  std::vector<int32_t> type_values(types->size);
  for (uint64_t i = 0; i < types->size; ++i) type_values[i] = types->Get<int32_t>(i);
  b.AddInt32Array("tokenizer.ggml.token_type", type_values);
  b.AddUint32("tokenizer.ggml.bos_token_id", 1);
  b.AddUint32("tokenizer.ggml.eos_token_id", 2);
  auto file = GgufFile::Open(testing::WriteTempFile(b.Build(), "vocab_" + pre + ".gguf"));
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? std::move(*file) : nullptr;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

class TokenizerVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectorsTest, MatchesHuggingFace) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  static const auto* vectors = new std::map<std::string, std::vector<Vector>>(LoadVectors());
  const std::string pre = GetParam();
  const std::vector<Vector>& cases = vectors->at(pre);
  auto model = GgufFile::Open(kDefaultModelPath);
  ASSERT_TRUE(model.ok()) << model.status();
  std::unique_ptr<GgufFile> vocab_file = pre == "smollm" ? std::move(*model) : VocabularyWithPre(**model, pre);
  ASSERT_NE(vocab_file, nullptr);
  auto impl = Tokenizer::Impl::FromGguf(*vocab_file);
  ASSERT_TRUE(impl.ok()) << impl.status();
  int failures = 0;
  for (const Vector& v : cases) {
    std::vector<int32_t> ids;
    ASSERT_TRUE((*impl)->Encode(v.text, false, v.parse_special, ids).ok());
    if (ids != v.ids && ++failures <= 10) {
      ADD_FAILURE() << "pre=" << pre << " parse_special=" << v.parse_special << " text=\""
                    << absl::CEscape(v.text) << "\"\n  got:  " << Show(ids) << "\n  want: " << Show(v.ids);
    }
    // Round trip for every input whose bytes all have tokens (the rest are dropped by design).
    std::string decoded;
    for (int32_t id : ids) decoded += (*impl)->TokenBytes(id);
    bool representable = true;
    for (unsigned char c : v.text) representable &= (*impl)->bpe->CanRepresent(c);
    if (representable && decoded != v.text && ++failures <= 10) {
      ADD_FAILURE() << "round trip failed for \"" << absl::CEscape(v.text) << "\": \"" << absl::CEscape(decoded) << "\"";
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " vectors";
  if (pre == "smollm") {
    EXPECT_GE(cases.size(), 600u);
  }
}

INSTANTIATE_TEST_SUITE_P(PreTokenizers, TokenizerVectorsTest,
                         ::testing::Values("smollm", "gpt-2", "llama-bpe", "qwen2", "default"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace hetero
