// Tokenizer throughput on the default model: encoding English prose (target >= 5 MB/s on
// the 2-core development machine), decoding, and streaming detokenization. Bytes counters
// report input bytes per second.
#include <filesystem>
#include <string>

#include "benchmark/benchmark.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"

namespace hetero {
namespace {

// ~1 KiB of ordinary English prose, repeated to the requested size.
constexpr char kProse[] =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters. \"My dear Mr. Bennet,\" said his lady to him one day, \"have you heard that "
    "Netherfield Park is let at last?\" Mr. Bennet replied that he had not. \"But it is,\" "
    "returned she; \"for Mrs. Long has just been here, and she told me all about it.\" Mr. Bennet "
    "made no answer. \"Do you not want to know who has taken it?\" cried his wife impatiently. "
    "\"You want to tell me, and I have no objection to hearing it.\" This was invitation enough. "
    "In 1813 the novel sold for 18 shillings; by 2013, 200 years later, over 20 million copies "
    "had been sold worldwide.\n\n";

const Tokenizer* DefaultTokenizer(benchmark::State& state) {
  static const Tokenizer* tokenizer = []() -> const Tokenizer* {
    if (!std::filesystem::exists(kDefaultModelPath)) return nullptr;
    auto model = Model::Load(kDefaultModelPath);
    if (!model.ok()) return nullptr;
    auto t = Tokenizer::Create(**model);
    return t.ok() ? t->release() : nullptr;
  }();
  if (tokenizer == nullptr) state.SkipWithError("default model not present (run bash scripts/setup.sh --model)");
  return tokenizer;
}

std::string Prose(size_t bytes) {
  std::string text;
  while (text.size() < bytes) text += kProse;
  text.resize(bytes);
  return text;
}

void BM_EncodeProse(benchmark::State& state) {
  const Tokenizer* tokenizer = DefaultTokenizer(state);
  if (tokenizer == nullptr) return;
  const std::string text = Prose(static_cast<size_t>(state.range(0)));
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tokenizer->Encode(text, false, true);
    tokens = ids->size();
    benchmark::DoNotOptimize(ids);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
  state.counters["bytes/token"] = static_cast<double>(text.size()) / static_cast<double>(tokens);
}
BENCHMARK(BM_EncodeProse)->Arg(1 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

void BM_DecodeProse(benchmark::State& state) {
  const Tokenizer* tokenizer = DefaultTokenizer(state);
  if (tokenizer == nullptr) return;
  const std::string text = Prose(1 << 20);
  const std::vector<int32_t> ids = *tokenizer->Encode(text, false, true);
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer->Decode(ids));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_DecodeProse)->Unit(benchmark::kMillisecond);

void BM_StreamingDetokenize(benchmark::State& state) {
  const Tokenizer* tokenizer = DefaultTokenizer(state);
  if (tokenizer == nullptr) return;
  const std::string text = Prose(1 << 16);
  const std::vector<int32_t> ids = *tokenizer->Encode(text, false, true);
  for (auto _ : state) {
    StreamingDetokenizer stream(*tokenizer);
    for (int32_t id : ids) benchmark::DoNotOptimize(stream.Push(id));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ids.size()));
}
BENCHMARK(BM_StreamingDetokenize)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace hetero
