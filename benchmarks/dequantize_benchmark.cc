// Reference (scalar) dequantization throughput per weight type at a real matrix shape
// (SmolLM2's FFN: 1536 x 576). Reported as bytes of weights read per second and
// elements produced per second. These are the bit-exact reference routines, not the
// backend kernels; they bound what a "dequantize at load" strategy costs.
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"

namespace hetero {
namespace {

constexpr int64_t kRows = 1536;
constexpr int64_t kCols = 576;

void BM_Dequantize(benchmark::State& state) {
  const auto type = static_cast<TensorType>(state.range(0));
  const TensorTypeTraits& traits = GetTensorTypeTraits(type);
  const int64_t n = kRows * kCols;
  std::vector<uint8_t> bytes(n / traits.block_size * traits.type_size);
  std::mt19937 rng(1);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  // Keep scale fields finite so the arithmetic is representative (no NaN slow paths):
  // overwrite every 16-bit word that decodes to inf/NaN with 1.0.
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, &bytes[i], 2);
    if ((h & 0x7C00) == 0x7C00) bytes[i + 1] &= 0xBB;
  }
  if (type == TensorType::kF32) {
    for (size_t i = 0; i + 3 < bytes.size(); i += 4) bytes[i + 3] &= 0x3F;
  }
  std::vector<float> out(n);
  state.SetLabel(std::string(traits.name));
  for (auto _ : state) {
    absl::Status s = Dequantize(type, bytes, absl::MakeSpan(out));
    benchmark::DoNotOptimize(out.data());
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
  state.counters["elements/s"] =
      benchmark::Counter(static_cast<double>(n) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Dequantize)
    ->ArgName("type")
    ->DenseRange(0, 1)  // F32, F16
    ->Arg(30)           // BF16
    ->Args({2})->Args({3})->Args({6})->Args({7})->Args({8})  // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
    ->DenseRange(10, 15)                                     // Q2_K .. Q8_K
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace hetero
