// Batched decode on the default model: one Decode call appends a token to each of `batch`
// sequences (continuous batching's step). tokens/s counts every sequence's token, so the
// ratio of batch B to batch 1 is what batching buys. Contexts stay at 32..95 tokens.
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "hetero/model.h"
#include "src/cpu/cpu_backend.h"

namespace hetero {
namespace {

constexpr int kPromptTokens = 32;
constexpr int kMaxContext = 96;

void BM_DecodeStep(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  auto model = Model::Load(kDefaultModelPath);
  if (!model.ok()) {
    state.SkipWithError(std::string(model.status().message()).c_str());
    return;
  }
  CpuBackendOptions options;
  options.threads = static_cast<int>(state.range(1));
  options.max_sequences = batch;
  auto backend = CpuBackend::Create(**model, options);
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return;
  }
  CpuBackend& b = **backend;
  const int vocab = b.vocab_size();
  std::vector<SequenceId> seqs;
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  std::vector<int32_t> prompt(kPromptTokens);
  for (int i = 0; i < kPromptTokens; ++i) prompt[i] = 100 + 37 * i;
  for (int s = 0; s < batch; ++s) {
    seqs.push_back(*b.NewSequence());
    prompt[0] = 200 + s;  // distinct contexts
    if (!b.Prefill(seqs.back(), prompt, absl::MakeSpan(logits.data(), vocab)).ok()) {
      state.SkipWithError("prefill failed");
      return;
    }
  }
  std::vector<int32_t> tokens(batch);
  int length = kPromptTokens;
  for (auto _ : state) {
    for (int s = 0; s < batch; ++s) tokens[s] = 300 + (length * 7 + s) % 1000;
    if (!b.Decode(seqs, tokens, absl::MakeSpan(logits)).ok()) {
      state.SkipWithError("decode failed");
      return;
    }
    if (++length == kMaxContext) {
      state.PauseTiming();
      for (SequenceId seq : seqs) (void)b.TruncateSequence(seq, kPromptTokens);
      length = kPromptTokens;
      state.ResumeTiming();
    }
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(batch) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeStep)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{1, 2, 4, 8, 16}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace hetero
