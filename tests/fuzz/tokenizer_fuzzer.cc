// Fuzzes both tokenizers. Properties checked on every input:
//  - Encode never fails on any bytes, with or without special-token parsing;
//  - Decode(Encode(s)) == s when every byte of s has a token (byte-level BPE with the
//    default model's vocabulary), and for SentencePiece with byte fallback when special
//    tokens are not parsed (except text holding U+2581, SentencePiece's own space marker);
//  - the streaming detokenizer's pieces are valid UTF-8 and join to the lossy decoding.
// The byte-level vocabulary is the default model's ($HETERO_MODEL or models/...).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "src/runtime/gguf.h"
#include "src/runtime/tokenizer/tokenizer_impl.h"
#include "src/runtime/tokenizer/utf8.h"
#include "tests/support/gguf_builder.h"

namespace {

std::unique_ptr<hetero::Model> g_model;
std::unique_ptr<hetero::Tokenizer> g_bpe;
std::vector<uint8_t> g_spm_bytes;
std::unique_ptr<hetero::GgufFile> g_spm_file;
std::unique_ptr<hetero::Tokenizer::Impl> g_spm;

// A small SentencePiece vocabulary: control tokens, 256 byte tokens, a few pieces.
std::vector<uint8_t> SpmVocabulary() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  const char* pieces[] = {"\xE2\x96\x81", "\xE2\x96\x81t", "he", "\xE2\x96\x81the", "e", "t", "h", "a", "\xE2\x96\x81" "a",
                          "in", "\xE2\x96\x81in", "\xC3\xA9", "\xE4\xB8\xAD", "\xE2\x96\x81\xE2\x96\x81"};
  float score = -1;
  for (const char* p : pieces) {
    tokens.push_back(p);
    scores.push_back(score -= 0.5f);
    types.push_back(1);
  }
  hetero::testing::GgufBuilder b;
  b.AddSpmVocabulary(tokens, scores, types);
  return b.Build();
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto path = hetero::ResolveModelPath("");
  if (!path.ok()) {
    std::fprintf(stderr, "tokenizer_fuzzer: %s\n", std::string(path.status().message()).c_str());
    std::exit(1);
  }
  auto model = hetero::Model::Load(*path);
  auto tokenizer = model.ok() ? hetero::Tokenizer::Create(**model) : model.status();
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "tokenizer_fuzzer: %s\n", std::string(tokenizer.status().message()).c_str());
    std::exit(1);
  }
  g_model = std::move(*model);
  g_bpe = std::move(*tokenizer);
  g_spm_bytes = SpmVocabulary();
  g_spm_file = std::move(*hetero::GgufFile::Parse(g_spm_bytes));
  g_spm = std::move(*hetero::Tokenizer::Impl::FromGguf(*g_spm_file));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool parse_special = data[0] & 1;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  // Byte-level BPE.
  auto ids = g_bpe->Encode(text, false, parse_special);
  Check(ids.ok(), "BPE encode succeeds");
  auto decoded = g_bpe->Decode(*ids);
  Check(decoded.ok(), "BPE decode succeeds");
  bool representable = true;
  for (unsigned char c : text) representable &= g_bpe->impl().bpe->CanRepresent(c);
  if (representable) Check(*decoded == text, "BPE round trip");
  hetero::StreamingDetokenizer stream(*g_bpe);
  std::string streamed;
  for (int32_t id : *ids) {
    auto piece = stream.Push(id);
    Check(piece.ok() && hetero::IsValidUtf8(*piece), "streamed pieces are valid UTF-8");
    streamed += *piece;
  }
  streamed += stream.Flush();
  std::string lossy;
  hetero::AppendUtf8Lossy(*decoded, lossy);
  Check(streamed == lossy, "streaming equals lossy decoding");

  // SentencePiece with byte fallback.
  std::vector<int32_t> spm_ids;
  Check(g_spm->Encode(text, false, parse_special, spm_ids).ok(), "SPM encode succeeds");
  std::string spm_text;
  bool at_start = true;
  for (int32_t id : spm_ids) {
    std::string bytes = g_spm->TokenBytes(id);
    if (at_start && g_spm->StripsLeadingSpace(id) && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    if (g_spm->vocab.types[id] != hetero::TokenType::kControl) at_start = false;
    spm_text += bytes;
  }
  // A special token matched inside the text brings a prefix space after it (llama.cpp's
  // rule), so the round trip is only promised for plain text.
  if (!parse_special && text.find("\xE2\x96\x81") == std::string::npos) Check(spm_text == text, "SPM round trip");
  return 0;
}
