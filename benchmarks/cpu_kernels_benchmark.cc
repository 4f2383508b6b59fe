// CPU kernels at the default model's shapes (SmolLM2-135M: hidden 576, FFN 1536, 9 heads
// of 64, 3 KV heads, vocabulary 49152), each reporting what bounds it: bytes per second
// for memory-bound work (compare BM_MemoryRead, this machine's read bandwidth) and FLOP/s
// for compute-bound work (compare BM_OneDnnGemm/bf16, oneDNN's bf16 peak here).
// Argument `threads`: the thread pool of our kernels (src/cpu/thread_pool.h), or OpenMP's team
// for oneDNN and the bandwidth loop.
#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdlib>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "src/cpu/attention.h"
#include "src/cpu/cpu_features.h"
#include "src/cpu/linear.h"
#include "src/cpu/quant_blocks.h"
#include "src/cpu/quant_matmul.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/fp16.h"
#include "src/runtime/kv_layout.h"

namespace hetero {
namespace {

// The kernels' prefetch distance is tuned while products run (src/cpu/prefetch_tuner.h);
// here it is fixed, so that a case's figure does not depend on which cases ran before it.
// Set HETERO_PREFETCH_BYTES to measure another distance.
[[maybe_unused]] const bool kPrefetchPinned = setenv("HETERO_PREFETCH_BYTES", "8192", /*overwrite=*/0) == 0;

// Random blocks with every fp16 field set to 0.01 (random bytes there would be NaN or
// subnormal too often, and subnormals are slow).
std::vector<uint8_t> RandomBlocks(TensorType type, int n, int k) {
  const TensorTypeTraits& t = GetTensorTypeTraits(type);
  std::vector<uint8_t> data(static_cast<size_t>(n) * (k / t.block_size) * t.type_size);
  std::mt19937 rng(1);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  const std::vector<int> fields = internal::Fp16FieldOffsets(type);
  const uint16_t d = Fp32ToFp16(0.01f);
  for (size_t off = 0; off < data.size(); off += t.type_size) {
    for (int f : fields) std::memcpy(data.data() + off + f, &d, 2);
  }
  return data;
}

std::vector<float> RandomFloats(size_t n) {
  std::vector<float> v(n);
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& x : v) x = d(rng);
  return v;
}

// Sums floats[begin, end) in 128 independent lanes (8 vectors of 16), so neither the adds'
// latency nor the vector width bounds the read; with `prefetch_ahead` > 0, each line is
// requested that many bytes before it is added (what the decode kernels do).
double SumLanes(const float* data, size_t begin, size_t end, size_t prefetch_ahead) {
  float lanes[128] = {};
  for (size_t i = begin; i < end; i += 128) {
    if (prefetch_ahead > 0) {
      for (size_t line = 0; line < 128 * sizeof(float); line += 64) {
        __builtin_prefetch(reinterpret_cast<const char*>(data + i) + prefetch_ahead + line, 0, 3);
      }
    }
    for (int j = 0; j < 128; ++j) lanes[j] += data[i + j];
  }
  double total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

// Read bandwidth ceilings. `mib`: the buffer, 256 MiB (far past the caches: decode's bound,
// DRAM) or 16 MiB (within a 32 MiB L3: the bound when the model fits in the L3, as the
// default model does on a Xeon with a large one). `prefetch_kib`: 0 leaves the streams to the
// hardware prefetchers, else the software prefetch distance. Each thread reads its own
// contiguous part of the buffer, as the kernels' static schedules do; the ceiling is the
// fastest row of a given size and thread count.
void BM_MemoryRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  const size_t n = (static_cast<size_t>(state.range(1)) << 20) / sizeof(float);
  const size_t prefetch_ahead = static_cast<size_t>(state.range(2)) << 10;
  std::vector<float> data(n + 128, 1.0f);  // the lane loop reads whole runs of 128
  for (auto _ : state) {
    double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const size_t per = n / 128 / omp_get_num_threads() * 128;
      const size_t begin = per * omp_get_thread_num();
      total += SumLanes(data.data(), begin, begin + per, prefetch_ahead);
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n * sizeof(float)));
}
BENCHMARK(BM_MemoryRead)
    ->ArgNames({"threads", "mib", "prefetch_kib"})
    ->ArgsProduct({{1, 2}, {256, 16}, {0, 16}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One parallel loop of decode's size for the pool's own cost: a decode step runs ~200 loops
// of 10-20 us each (the default model), so the handing out of chunks and the reporting back
// must stay well under a microsecond. Each of `items` indices sums 4 KiB that stays in
// cache; time per loop = the work (items x ~0.1 us over the threads) + the pool's cost.
void BM_ThreadPoolLoop(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int items = static_cast<int>(state.range(1));
  std::vector<float> data(static_cast<size_t>(items) * 1024, 1.0f);
  std::vector<float> out(static_cast<size_t>(items));
  for (auto _ : state) {
    pool.ParallelFor(items, ThreadPool::Schedule::kStatic, [&](int i) {
      float lanes[16] = {};
      const float* p = data.data() + static_cast<size_t>(i) * 1024;
      for (int j = 0; j < 1024; j += 16) {
        for (int l = 0; l < 16; ++l) lanes[l] += p[j + l];
      }
      float total = 0;
      for (float lane : lanes) total += lane;
      out[static_cast<size_t>(i)] = total;
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());  // loops per second
}
BENCHMARK(BM_ThreadPoolLoop)->ArgNames({"threads", "items"})->ArgsProduct({{2}, {8, 64, 576}})->UseRealTime();

// Decode's matrix-vector products on native blocks: bytes = weight bytes read.
void BM_QuantGemv(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(3)));
  const ScopedThreadPool use_pool(&pool);
  const auto type = static_cast<TensorType>(state.range(0));
  const int n = static_cast<int>(state.range(1)), k = static_cast<int>(state.range(2));
  const bool two_passes = state.range(4) == 2;  // a generated token's input and its remainder
  // Copies of at least 192 MiB in all, so the weights do not sit in cache between
  // iterations (as in decode, where each matrix is read once per token), whatever the
  // format's size: a 32 MiB L3 keeps part of two 28 MiB copies.
  std::vector<std::vector<uint8_t>> blocks{RandomBlocks(type, n, k)};
  const int copies = static_cast<int>((size_t{192} << 20) / blocks[0].size()) + 1;
  std::vector<QuantizedWeights> weights;
  for (int c = 1; c < copies; ++c) blocks.push_back(RandomBlocks(type, n, k));
  for (int c = 0; c < copies; ++c) weights.push_back(QuantizedWeights::FromBlocks(type, n, k, blocks[c].data()));
  const std::vector<float> x = RandomFloats(k);
  std::vector<float> y(n);
  QuantizedActivations a;
  int c = 0;
  for (auto _ : state) {
    if (two_passes) {
      a.QuantizeWithRemainder(x.data(), 1, k, k);
    } else {
      a.Quantize(x.data(), 1, k, k);
    }
    QuantMatmul(weights[c], a, y.data(), n);
    c = (c + 1) % copies;
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(blocks[0].size()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * k * state.iterations(), benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(TensorTypeName(type));
}
BENCHMARK(BM_QuantGemv)
    ->ArgNames({"type", "n", "k", "threads", "passes"})
    ->Args({3, 1536, 576, 1, 1})->Args({3, 1536, 576, 2, 1})   // Q4_1 ffn_gate / ffn_up
    ->Args({3, 576, 1536, 1, 1})->Args({3, 576, 1536, 2, 1})   // Q4_1 ffn_down
    ->Args({8, 49152, 576, 1, 1})->Args({8, 49152, 576, 2, 1})  // Q8_0 output (tied embedding)
    // The block formats of a Q4_K_M / Q5_K_M file of the default model's shape.
    ->Args({6, 1536, 576, 2, 1})->Args({7, 1536, 576, 2, 1})    // Q5_0, Q5_1 ffn_gate / ffn_up
    ->Args({12, 576, 1536, 2, 1})->Args({13, 576, 1536, 2, 1})  // Q4_K, Q5_K ffn_down
    ->Args({14, 576, 1536, 2, 1})                               // Q6_K ffn_down
    // A tied output matrix that Q4_K_M files store in Q6_K (granite-3.0-1b-a400m's), and
    // the same shape in Q4_K: the two formats' rates from memory, side by side.
    ->Args({14, 49152, 1024, 2, 1})->Args({12, 49152, 1024, 2, 1})
    // The same products as a generated token runs them with AVX-512 VNNI (its input and the
    // input's remainder, two int8 passes over each weight read): what the second pass costs
    // when the weights come from memory.
    ->Args({8, 49152, 576, 2, 2})->Args({14, 49152, 1024, 2, 2})->Args({12, 49152, 1024, 2, 2})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same products with the weights in the L2 cache (one copy of about 256 KiB, one
// thread): the kernels' compute ceiling in weight bytes per second per core. Where it is
// not well above the memory rate per core (BM_MemoryRead/threads:1/mib:256), decode from
// memory is bound by the kernel's instructions rather than by the reads.
void BM_QuantGemvInCache(benchmark::State& state) {
  ThreadPool pool(1);
  const ScopedThreadPool use_pool(&pool);
  const auto type = static_cast<TensorType>(state.range(0));
  const int k = 1024;
  const TensorTypeTraits& traits = GetTensorTypeTraits(type);
  const size_t row_bytes = static_cast<size_t>(k / traits.block_size) * traits.type_size;
  const int n = static_cast<int>((size_t{256} << 10) / row_bytes) / 16 * 16;
  const bool two_passes = state.range(1) == 2;
  const std::vector<uint8_t> blocks = RandomBlocks(type, n, k);
  const QuantizedWeights weights = QuantizedWeights::FromBlocks(type, n, k, blocks.data());
  const std::vector<float> x = RandomFloats(k);
  std::vector<float> y(n);
  QuantizedActivations a;
  for (auto _ : state) {
    if (two_passes) {
      a.QuantizeWithRemainder(x.data(), 1, k, k);
    } else {
      a.Quantize(x.data(), 1, k, k);
    }
    QuantMatmul(weights, a, y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(blocks.size()));
  state.SetLabel(TensorTypeName(type));
}
BENCHMARK(BM_QuantGemvInCache)
    ->ArgNames({"type", "passes"})
    ->ArgsProduct({{2, 3, 8, 12, 13, 14}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// A mixture of experts' decode step at granite-3.0-1b-a400m's shape (hidden 1024, experts
// of FFN 512, 8 chosen per token): every chosen expert's gate and up in one parallel step,
// then their downs, as src/cpu/experts.cc runs them. The experts are drawn at random from
// 512 MiB of them, so each step reads its weights from memory as a real model's does.
// Bytes = the chosen experts' weight bytes; compare BM_MemoryRead.
void BM_ExpertsDecodeStep(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(1)));
  const ScopedThreadPool use_pool(&pool);
  const auto type = static_cast<TensorType>(state.range(0));
  constexpr int kEmbd = 1024, kFf = 512, kUsed = 8;
  const std::vector<uint8_t> gate_blocks = RandomBlocks(type, kFf, kEmbd), down_blocks = RandomBlocks(type, kEmbd, kFf);
  const size_t expert_bytes = 2 * gate_blocks.size() + down_blocks.size();
  const int experts = static_cast<int>((size_t{512} << 20) / expert_bytes);
  std::vector<QuantizedWeights> gate, up, down;
  for (int e = 0; e < experts; ++e) {
    gate.push_back(QuantizedWeights::FromBlocks(type, kFf, kEmbd, gate_blocks.data()));
    up.push_back(QuantizedWeights::FromBlocks(type, kFf, kEmbd, gate_blocks.data()));
    down.push_back(QuantizedWeights::FromBlocks(type, kEmbd, kFf, down_blocks.data()));
  }
  const std::vector<float> x = RandomFloats(kEmbd);
  std::vector<float> g(kUsed * kFf), u(kUsed * kFf), y(kUsed * kEmbd);
  std::vector<QuantizedActivations> hidden(kUsed);
  QuantizedActivations a;
  std::mt19937 rng(3);
  for (auto _ : state) {
    int chosen[kUsed];
    for (int& e : chosen) e = static_cast<int>(rng() % experts);
    a.Quantize(x.data(), 1, kEmbd, kEmbd);
    std::vector<QuantMatmulTask> gate_up, downs;
    for (int i = 0; i < kUsed; ++i) {
      gate_up.push_back({&gate[chosen[i]], g.data() + i * kFf, kFf});
      gate_up.push_back({&up[chosen[i]], u.data() + i * kFf, kFf});
    }
    QuantMatmulMany(gate_up, a);
    for (int i = 0; i < kUsed; ++i) {
      hidden[i].Quantize(g.data() + i * kFf, 1, kFf, kFf);
      downs.push_back({&down[chosen[i]], y.data() + i * kEmbd, kEmbd, &hidden[i]});
    }
    QuantMatmulMany(downs, a);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kUsed * expert_bytes));
  state.SetLabel(TensorTypeName(type));
}
BENCHMARK(BM_ExpertsDecodeStep)
    ->ArgNames({"type", "threads"})
    ->Args({8, 1})->Args({8, 2})->Args({12, 2})->Args({14, 2})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// Batched decode's products: `rows` activation rows (sequences) against native weights,
// one thread. Weights fit in L2, so this measures the arithmetic, not memory.
void BM_QuantBatchedRows(benchmark::State& state) {
  omp_set_num_threads(1);
  const auto type = static_cast<TensorType>(state.range(0));
  const int n = static_cast<int>(state.range(1)), k = static_cast<int>(state.range(2));
  const int rows = static_cast<int>(state.range(3));
  const std::vector<uint8_t> blocks = RandomBlocks(type, n, k);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(type, n, k, blocks.data());
  const std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * k);
  std::vector<float> y(static_cast<size_t>(rows) * n);
  QuantizedActivations a;
  a.Quantize(x.data(), rows, k, k);
  for (auto _ : state) {
    QuantMatmul(w, a, y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(n) * k * rows * state.iterations(),
                                                benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(TensorTypeName(type));
}
BENCHMARK(BM_QuantBatchedRows)
    ->ArgNames({"type", "n", "k", "rows"})
    ->ArgsProduct({{3}, {1536}, {576}, {1, 2, 4, 8}})
    ->Args({3, 576, 1536, 8})
    ->Args({8, 4096, 576, 8})
    ->ArgsProduct({{6, 7}, {1536}, {576}, {1, 2, 8}})      // Q5_0, Q5_1
    ->ArgsProduct({{12, 13, 14, 23}, {576}, {1536}, {1, 2, 8}})  // Q4_K, Q5_K, Q6_K, IQ4_XS
    ->ArgsProduct({{10, 11}, {576}, {1536}, {1}})          // Q2_K, Q3_K (portable kernel)
    // A prompt's share: 64 rows, so each group's weights serve many rows from L1.
    ->ArgsProduct({{2, 3, 6, 8, 12, 13, 14}, {576}, {1536}, {64}})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

#if defined(__x86_64__)
// The AVX2 prompt kernels' vector work for 256 byte-products of one activation row
// (quant_matmul_avx2.cc, per half of a group and block) with every operand already in
// registers: no loads, no unpacking, so the instruction mix alone bounds it. Q4_0 (type 2):
// 8 vpmaddubsw, 8 int16/int32 adds, one vpmaddwd, and the float steps (convert, scale,
// multiply-add); Q8_0 (type 8) adds a vpsignb per product vector and widens each one with
// its own vpmaddwd (its pair sums reach 2^15). BM_QuantBatchedRows/rows:64 over this is the
// share of the instruction-mix ceiling a kernel reaches on this core.
template <bool kQ8>
__attribute__((target("avx2,fma"))) void ByteProductMix(int64_t iterations, float* out) {
  __m256i w[8];
  for (int t = 0; t < 8; ++t) w[t] = _mm256_set1_epi8(static_cast<char>(t + 1));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i word = _mm256_set1_epi32(0x01020304);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const __m256 half = _mm256_set1_ps(0.5f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {  // 8 accumulations (rows and halves), 256 products each
      __m256i x = word;
      __m256 d = half;
      asm volatile("" : "+x"(x), "+x"(d));  // values the compiler cannot reuse across accumulations
      __m256i sum;
      if constexpr (kQ8) {
        sum = _mm256_madd_epi16(_mm256_maddubs_epi16(w[0], _mm256_sign_epi8(x, w[0])), ones);
#pragma GCC unroll 8
        for (int t = 1; t < 8; ++t) {
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(w[t], _mm256_sign_epi8(x, w[t])), ones));
        }
      } else {
        sum = _mm256_maddubs_epi16(w[0], x);
#pragma GCC unroll 8
        for (int t = 1; t < 8; ++t) sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(w[t], x));
        sum = _mm256_add_epi32(_mm256_madd_epi16(sum, ones), x);  // the Q4_0 offset
      }
      const __m256 scale = _mm256_mul_ps(d, d);  // the weight's scale times the activation's
      acc[p & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, acc[p & 1]);
    }
  }
  _mm256_storeu_ps(out, _mm256_add_ps(acc[0], acc[1]));
}

void BM_ByteProductCeiling(benchmark::State& state) {
  const CpuInfo& cpu = DetectCpu();  // the kernels' own test (CPUID and XSAVE state)
  if (!cpu.avx2 || !cpu.fma) {
    state.SkipWithError("needs AVX2 and FMA");
    return;
  }
  const bool q8 = state.range(0) == 8;
  constexpr int64_t kIterations = 1 << 16;
  float out[8];
  for (auto _ : state) {
    if (q8) {
      ByteProductMix<true>(kIterations, out);
    } else {
      ByteProductMix<false>(kIterations, out);
    }
    benchmark::DoNotOptimize(out);
  }
  state.counters["GMAC/s"] = benchmark::Counter(256.0 * 8 * kIterations * state.iterations(),
                                                benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(q8 ? "Q8_0 mix" : "Q4_0 mix");
}
BENCHMARK(BM_ByteProductCeiling)->ArgName("type")->Arg(2)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Which other instructions the AVX-512 kernels' vpdpbusd competes with for issue: per
// iteration 8 independent 512-bit vpdpbusd, alone (mix 0) or with 8 independent 512-bit
// instructions of one other kind: vfmadd231ps (1), vcvtdq2ps (2), vpandd (3), vpsrlw (4),
// vpmovzxbd from memory (5), vpbroadcastd from memory (6). Written in assembly so that the
// compiler neither merges nor reorders them; the memory operands are one cached stack line.
// Where vpdpbusd/s drops with a mix against mix 0, that instruction takes the vpdpbusd's
// execution units: what each step of a kernel's epilogue costs in products, on this core.
#define HETERO_EIGHT(op, dst) op(dst, 16) op(dst, 17) op(dst, 18) op(dst, 19) op(dst, 20) op(dst, 21) op(dst, 22) op(dst, 23)
#define HETERO_DPBUSD(unused, r) "vpdpbusd %%zmm30, %%zmm31, %%zmm" #r "\n\t"
#define HETERO_OTHER(text, r) text "%%zmm" #r "\n\t"
#define HETERO_VNNI_CLOBBERS                                                                                     \
  "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", \
      "xmm28", "xmm29", "xmm30", "xmm31", "memory"
// The operands zmm30 and zmm31 are zeroed first (zeroing idioms, which take no unit), so no
// multiply-add meets a denormal or NaN left in them.
#define HETERO_VNNI_MIX(other)                                                                    \
  asm volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n\tvpxord %%zmm31, %%zmm31, %%zmm31\n\t"     \
               HETERO_EIGHT(HETERO_DPBUSD, 0) other : : "r"(line) : HETERO_VNNI_CLOBBERS)
#define HETERO_MIX_OF(text)                                                                                   \
  HETERO_OTHER(text, 24) HETERO_OTHER(text, 25) HETERO_OTHER(text, 26) HETERO_OTHER(text, 27)                 \
  HETERO_OTHER(text, 28) HETERO_OTHER(text, 29) HETERO_OTHER(text, 24) HETERO_OTHER(text, 25)
template <int kMix>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void VnniIssueMix(int64_t iterations) {
  alignas(64) const uint8_t line[64] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int64_t i = 0; i < iterations; ++i) {
    if constexpr (kMix == 0) HETERO_VNNI_MIX("");
    if constexpr (kMix == 1) HETERO_VNNI_MIX(HETERO_MIX_OF("vfmadd231ps %%zmm30, %%zmm31, "));
    if constexpr (kMix == 2) HETERO_VNNI_MIX(HETERO_MIX_OF("vcvtdq2ps %%zmm30, "));
    if constexpr (kMix == 3) HETERO_VNNI_MIX(HETERO_MIX_OF("vpandd %%zmm30, %%zmm31, "));
    if constexpr (kMix == 4) HETERO_VNNI_MIX(HETERO_MIX_OF("vpsrlw $4, %%zmm30, "));
    if constexpr (kMix == 5) HETERO_VNNI_MIX(HETERO_MIX_OF("vpmovzxbd 16(%0), "));
    if constexpr (kMix == 6) HETERO_VNNI_MIX(HETERO_MIX_OF("vpbroadcastd 4(%0), "));
  }
}

void BM_VnniIssueMix(benchmark::State& state) {
  const CpuInfo& cpu = DetectCpu();
  if (!cpu.avx512f || !cpu.avx512bw || !cpu.avx512_vnni) {
    state.SkipWithError("needs AVX-512 VNNI");
    return;
  }
  constexpr int64_t kIterations = 1 << 16;
  const int mix = static_cast<int>(state.range(0));
  for (auto _ : state) {
    switch (mix) {
      case 0: VnniIssueMix<0>(kIterations); break;
      case 1: VnniIssueMix<1>(kIterations); break;
      case 2: VnniIssueMix<2>(kIterations); break;
      case 3: VnniIssueMix<3>(kIterations); break;
      case 4: VnniIssueMix<4>(kIterations); break;
      case 5: VnniIssueMix<5>(kIterations); break;
      default: VnniIssueMix<6>(kIterations); break;
    }
  }
  state.counters["Gvpdpbusd/s"] = benchmark::Counter(8.0 * kIterations * state.iterations(),
                                                     benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  static const char* const kNames[] = {"alone", "+vfmadd231ps", "+vcvtdq2ps", "+vpandd",
                                       "+vpsrlw", "+vpmovzxbd", "+vpbroadcastd"};
  state.SetLabel(kNames[mix]);
}
BENCHMARK(BM_VnniIssueMix)->ArgName("mix")->DenseRange(0, 6)->Unit(benchmark::kMicrosecond)->UseRealTime();
#undef HETERO_MIX_OF
#undef HETERO_VNNI_MIX
#undef HETERO_VNNI_CLOBBERS
#undef HETERO_OTHER
#undef HETERO_DPBUSD
#undef HETERO_EIGHT
#endif  // __x86_64__

// The transient bf16 copy of a native matrix that the prompt GEMM path makes.
void BM_DequantizeToBf16(benchmark::State& state) {
  omp_set_num_threads(1);
  const int n = 1536, k = 576;
  const std::vector<uint8_t> blocks = RandomBlocks(TensorType::kQ4_1, n, k);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(TensorType::kQ4_1, n, k, blocks.data());
  std::vector<uint16_t> out(static_cast<size_t>(n) * k);
  for (auto _ : state) {
    DequantizeRowsToBf16(w, 0, n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(out.size() * 2));
}
BENCHMARK(BM_DequantizeToBf16)->Unit(benchmark::kMicrosecond);

// oneDNN matmuls at prompt shapes (512 x 576 x 1536): the compute ceiling.
void BM_OneDnnGemm(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(1)));
  const bool bf16 = state.range(0) == 1;
  const int m = 512, n = 1536, k = 576;
  static LinearContext ctx;
  // A GGUF-like F32 tensor to build the layer from.
  std::vector<float> w = RandomFloats(static_cast<size_t>(n) * k);
  GgufTensorInfo info;
  info.name = "bench";
  info.dims = {k, n};
  info.type = TensorType::kF32;
  info.n_elements = static_cast<uint64_t>(n) * k;
  info.n_bytes = info.n_elements * 4;
  info.data = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(w.data()), info.n_bytes);
  auto linear = MakeOneDnnLinear(ctx, info, bf16 ? MatmulPrecision::kBf16 : MatmulPrecision::kF32);
  if (!linear.ok()) {
    state.SkipWithError(std::string(linear.status().message()).c_str());
    return;
  }
  const std::vector<float> x = RandomFloats(static_cast<size_t>(m) * k);
  std::vector<float> y(static_cast<size_t>(m) * n);
  LinearScratch scratch;
  for (auto _ : state) {
    (*linear)->Forward(x.data(), m, y.data(), scratch).IgnoreError();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k * state.iterations(), benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(bf16 ? "bf16" : "f32");
}
BENCHMARK(BM_OneDnnGemm)->ArgNames({"bf16", "threads"})->Args({1, 1})->Args({1, 2})->Args({0, 1})->Args({0, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// Attention of a 512-token prompt (all rows at once) and of one decode step at 512 keys.
void BM_Attention(benchmark::State& state) {
  omp_set_num_threads(1);
  const int rows = static_cast<int>(state.range(0));
  const int keys = 512;
  const AttentionShape shape{9, 3, 64, 16, 0.125f};
  const Attention attention(shape);
  const int blocks = keys / shape.block_tokens;
  std::vector<float> kv = RandomFloats(static_cast<size_t>(blocks) * 2 * 3 * 16 * 64);
  SequenceKv seq;
  for (int b = 0; b < blocks; ++b) seq.blocks.push_back(kv.data() + static_cast<size_t>(b) * 2 * 3 * 16 * 64);
  const std::vector<float> q = RandomFloats(static_cast<size_t>(rows) * 9 * 64);
  std::vector<float> out(q.size());
  std::vector<int32_t> positions(rows);
  for (int r = 0; r < rows; ++r) positions[r] = keys - rows + r;
  std::vector<const SequenceKv*> kvs(rows, &seq);
  for (auto _ : state) {
    attention.Run(q.data(), rows, positions.data(), kvs, /*window=*/0, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  // Useful work: q.k and p.v over the causal keys.
  double flops = 0;
  for (int r = 0; r < rows; ++r) flops += 4.0 * 9 * 64 * (positions[r] + 1);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * state.iterations(), benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attention)->ArgName("rows")->Arg(512)->Arg(1)->Unit(benchmark::kMicrosecond);

// Decode's attention deep in a context, from memory: one query row per layer against
// `keys` keys, layer after layer, in a paged KV cache laid out as the CPU backend's (a
// block holds 16 tokens of every layer, so one head's keys of one layer are 4 KiB runs
// a block apart). The default model's attention shape (9 heads, 3 KV heads of 64); enough
// layers for 256 MiB of KV, far past any cache. Bytes: the keys and values read.
void BM_AttentionDecodeDeep(benchmark::State& state) {
  const int keys = static_cast<int>(state.range(0));
  ThreadPool pool(static_cast<int>(state.range(1)));
  const ScopedThreadPool use_pool(&pool);
  const AttentionShape shape{9, 3, 64, 16, 0.125f};
  const Attention attention(shape);
  const KvBlockLayout one_layer{/*n_layers=*/1, shape.n_kv_heads, shape.head_dim, shape.block_tokens};
  const size_t layer_floats = one_layer.layer_floats();
  const size_t layer_bytes_per_key = one_layer.bytes_per_token();
  const int layers = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / (layer_bytes_per_key * keys)));
  const int blocks = (keys + shape.block_tokens - 1) / shape.block_tokens;
  const size_t block_floats = KvBlockLayout{layers, shape.n_kv_heads, shape.head_dim, shape.block_tokens}.block_floats();
  std::vector<float> pool_floats(static_cast<size_t>(blocks) * block_floats);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& f : pool_floats) f = uniform(rng);
  std::vector<SequenceKv> kv(layers);
  for (int l = 0; l < layers; ++l) {
    for (int b = 0; b < blocks; ++b) kv[l].blocks.push_back(pool_floats.data() + b * block_floats + l * layer_floats);
  }
  const std::vector<float> q = RandomFloats(static_cast<size_t>(shape.n_heads) * shape.head_dim);
  std::vector<float> out(q.size());
  const int32_t position = keys - 1;
  for (auto _ : state) {
    for (int l = 0; l < layers; ++l) {
      const std::vector<const SequenceKv*> row{&kv[l]};
      attention.Run(q.data(), 1, &position, row, /*window=*/0, out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(layers) * keys * layer_bytes_per_key);
}
BENCHMARK(BM_AttentionDecodeDeep)
    ->ArgNames({"keys", "threads"})
    ->Args({1024, 2})->Args({4096, 2})->Args({4096, 1})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace hetero
