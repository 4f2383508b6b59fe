// Opening a model: mapping and parsing the GGUF file (header, 33 keys including the
// 49152-entry vocabulary, 272 tensor infos) and validating the configuration, on the
// default model. The peer measured beside it is gguf-py's GGUFReader
// (scripts/bench_gguf_peer.py); see docs/PERFORMANCE.md.
#include <filesystem>

#include "benchmark/benchmark.h"
#include "hetero/model.h"
#include "src/runtime/gguf.h"

namespace hetero {
namespace {

bool HaveDefaultModel(benchmark::State& state) {
  if (std::filesystem::exists(kDefaultModelPath)) return true;
  state.SkipWithError("default model not present (run bash scripts/setup.sh --model)");
  return false;
}

void BM_GgufOpen(benchmark::State& state) {
  if (!HaveDefaultModel(state)) return;
  for (auto _ : state) {
    auto file = GgufFile::Open(kDefaultModelPath);
    if (!file.ok()) state.SkipWithError(std::string(file.status().message()).c_str());
    benchmark::DoNotOptimize(file);
  }
}
BENCHMARK(BM_GgufOpen)->Unit(benchmark::kMillisecond);

void BM_ModelLoad(benchmark::State& state) {
  if (!HaveDefaultModel(state)) return;
  for (auto _ : state) {
    auto model = Model::Load(kDefaultModelPath);
    if (!model.ok()) state.SkipWithError(std::string(model.status().message()).c_str());
    benchmark::DoNotOptimize(model);
  }
}
BENCHMARK(BM_ModelLoad)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hetero
