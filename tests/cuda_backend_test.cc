// The CUDA backend against the CPU backend in f32 (the accuracy reference), the KV handoff
// from a CPU prefill, batching and multi-pass prompts. Every GPU test skips by name, with
// the reason, on machines without a usable device; the unavailable path runs everywhere.
#include <algorithm>
#include <atomic>
#include <map>
#include <ostream>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "hetero/devices.h"
#include "nlohmann/json.hpp"
#include "hetero/engine.h"
#include "hetero/scheduler.h"
#include "src/cpu/cpu_backend.h"
#include "src/gpu/cuda_backend.h"
#include "tests/support/default_model.h"
#include "tests/support/tiny_model.h"
#include "tests/support/relative_l2.h"

namespace hetero {
namespace {

using ::hetero::testing::RelativeL2;

#define HETERO_SKIP_WITHOUT_GPU()                                                       \
  if (!QueryDevices().cuda.available) {                                                 \
    GTEST_SKIP() << "no usable CUDA device: " << QueryDevices().cuda.notice;            \
  }

int32_t Argmax(absl::Span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& v : t) v = static_cast<int32_t>(rng() % vocab);
  return t;
}

std::unique_ptr<CpuBackend> CpuReference(const Model& model) {
  CpuBackendOptions options;
  options.threads = 2;
  options.precision = CpuPrecision::kF32;
  auto b = CpuBackend::Create(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

std::unique_ptr<CudaBackend> Gpu(const Model& model, int max_rows = 512, bool share_kv_prefixes = true) {
  CudaBackendOptions options;
  options.max_rows_per_pass = max_rows;
  options.share_kv_prefixes = share_kv_prefixes;
  options.kv_capacity_tokens = 8192;
  options.max_sequences = 128;
  auto b = CudaBackend::Create(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

// Prefill `prompt`, then `steps` greedy decode steps on both backends, each following its
// own choices; logits compared at every step while the choices agree.
struct Comparison {
  double worst_l2 = 0;
  int equal_steps = 0;
};

Comparison CompareGreedy(Backend& gpu, Backend& cpu, const std::vector<int32_t>& prompt, int steps) {
  Comparison c;
  const int V = cpu.vocab_size();
  std::vector<float> lg(V), lc(V);
  auto sg = gpu.NewSequence();
  auto sc = cpu.NewSequence();
  EXPECT_TRUE(sg.ok() && sc.ok());
  EXPECT_TRUE(gpu.Prefill(*sg, prompt, absl::MakeSpan(lg)).ok());
  EXPECT_TRUE(cpu.Prefill(*sc, prompt, absl::MakeSpan(lc)).ok());
  for (int i = 0; i <= steps; ++i) {
    c.worst_l2 = std::max(c.worst_l2, RelativeL2(lg, lc));
    const int32_t tg = Argmax(lg), tc = Argmax(lc);
    if (tg != tc || i == steps) break;
    ++c.equal_steps;
    EXPECT_TRUE(gpu.Decode({&*sg, 1}, {&tg, 1}, absl::MakeSpan(lg)).ok());
    EXPECT_TRUE(cpu.Decode({&*sc, 1}, {&tc, 1}, absl::MakeSpan(lc)).ok());
  }
  gpu.FreeSequence(*sg);
  cpu.FreeSequence(*sc);
  return c;
}

TEST(CudaBackendTest, UnavailableWithoutADeviceNamesTheReason) {
  if (QueryDevices().cuda.available) GTEST_SKIP() << "a CUDA device is present; the unavailable path is not taken";
  testing::TinyModelOptions o;
  auto model = Model::Load(testing::WriteTinyModel(o, "cuda_unavailable.gguf"));
  ASSERT_TRUE(model.ok());
  auto b = CudaBackend::Create(**model, CudaBackendOptions{});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find(QueryDevices().cuda.notice), std::string::npos) << b.status();
}

// An architecture's tiny model: head_dim 32 (the least the GPU attention takes) and
// whatever the architecture's steps need to show (windows shorter than the 37-token
// prompt, scales far from 1, Llama 3 frequency factors).
struct TinyCase {
  TinyCase(std::string architecture_, TensorType type_) : architecture(std::move(architecture_)), type(type_) {}
  TinyCase& Window(int n) { sliding_window = n; return *this; }
  TinyCase& FreqFactors() { rope_freq_factors = true; return *this; }
  TinyCase& Keys(std::map<std::string, float> keys) { float_keys = std::move(keys); return *this; }
  TinyCase& Layers(int n) { n_layers = n; return *this; }
  TinyCase& Label(std::string l) { label = std::move(l); return *this; }
  // 256 wide (8 heads of 32) with a 512-wide FFN: whole 256-element K-quant super-blocks.
  TinyCase& Wide() { wide = true; return *this; }
  TinyCase& Types(std::map<std::string, TensorType> types) { tensor_types = std::move(types); return *this; }
  // Experts in place of the dense FFN: `used` of `count` per token, each n_ff_expert wide,
  // and a shared expert where n_ff_shared > 0.
  TinyCase& Experts(int count, int used, int n_ff_expert, int n_ff_shared = 0) {
    n_experts = count;
    n_experts_used = used;
    expert_ff = n_ff_expert;
    shared_ff = n_ff_shared;
    return *this;
  }

  std::string architecture;
  TensorType type;
  int sliding_window = 0;
  bool rope_freq_factors = false;
  std::map<std::string, float> float_keys;
  int n_layers = 2;
  std::string label;  // the test's name suffix; the architecture's name when empty
  bool wide = false;
  std::map<std::string, TensorType> tensor_types;
  int n_experts = 0, n_experts_used = 0, expert_ff = 0, shared_ff = 0;
};

// gtest names a case by this (not by its bytes) in its logs.
void PrintTo(const TinyCase& c, std::ostream* os) {
  *os << (c.label.empty() ? c.architecture : c.label) << " " << TensorTypeName(c.type);
}

class CudaTinyModelTest : public ::testing::TestWithParam<TinyCase> {};

TEST_P(CudaTinyModelTest, MatchesTheCpuF32Path) {
  HETERO_SKIP_WITHOUT_GPU();
  testing::TinyModelOptions o;
  o.architecture = GetParam().architecture;
  o.weight_type = GetParam().type;
  o.n_embd = 128;  // head_dim 32, the smallest the GPU attention takes
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.n_ff = 160;
  o.n_layers = GetParam().n_layers;
  if (GetParam().wide) {
    o.n_embd = 256;
    o.n_heads = 8;
    o.n_ff = 512;
  }
  o.tensor_types = GetParam().tensor_types;
  o.n_experts = GetParam().n_experts;
  o.n_experts_used = GetParam().n_experts_used;
  o.n_ff_expert = GetParam().expert_ff;
  o.n_ff_shared = GetParam().shared_ff;
  o.sliding_window = GetParam().sliding_window;
  o.rope_freq_factors = GetParam().rope_freq_factors;
  o.float_keys = GetParam().float_keys;
  auto model = Model::Load(testing::WriteTinyModel(o, "cuda_tiny_" + o.architecture + ".gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto cpu = CpuReference(**model);
  auto gpu = Gpu(**model);
  ASSERT_TRUE(cpu && gpu);
  for (int length : {1, 9, 37}) {
    const Comparison c = CompareGreedy(*gpu, *cpu, RandomTokens(length, o.n_vocab, length), 12);
    std::printf("%s %s prompt %d: worst relative L2 %.2e, %d equal greedy steps\n", o.architecture.c_str(),
                TensorTypeName(o.weight_type).c_str(), length, c.worst_l2, c.equal_steps);
    EXPECT_LE(c.worst_l2, 2e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaTinyModelTest,
                         ::testing::Values(TinyCase("llama", TensorType::kF16), TinyCase("llama", TensorType::kQ4_0),
                                           TinyCase("llama", TensorType::kQ4_1), TinyCase("llama", TensorType::kQ8_0),
                                           TinyCase("qwen2", TensorType::kQ4_1),
                                           // q/k norms per head
                                           TinyCase("qwen3", TensorType::kQ8_0),
                                           // five local layers (window 8, their own RoPE base) and a
                                           // global one; q/k norms, post-block norms, GeGLU, embedding scale
                                           TinyCase("gemma3", TensorType::kF16).Window(8).Layers(6),
                                           // fused q|k|v and gate|up, a sliding window
                                           TinyCase("phi3", TensorType::kQ4_0).Window(16),
                                           // Llama 3 frequency factors, a Mistral-style window
                                           TinyCase("llama", TensorType::kF16).Window(12).FreqFactors().Label("llama3_window"),
                                           // embedding, attention, residual and logit multipliers
                                           // the GPU's native block formats beyond Q4_0/Q4_1/Q8_0, and a
                                           // Q4_K_M-style mix (v and down in Q6_K)
                                           TinyCase("llama", TensorType::kQ4_K).Wide(),
                                           TinyCase("llama", TensorType::kQ5_K).Wide(),
                                           TinyCase("llama", TensorType::kQ6_K).Wide(),
                                           TinyCase("qwen2", TensorType::kQ5_0), TinyCase("llama", TensorType::kQ5_1),
                                           // the small formats (2- and 3-bit K, the 4-bit codebook)
                                           TinyCase("llama", TensorType::kQ2_K).Wide(),
                                           TinyCase("llama", TensorType::kQ3_K).Wide(),
                                           TinyCase("llama", TensorType::kIQ4_XS).Wide(),
                                           TinyCase("qwen2", TensorType::kIQ4_NL),
                                           TinyCase("llama", TensorType::kQ4_K)
                                               .Wide()
                                               .Types({{"attn_v.weight", TensorType::kQ6_K},
                                                       {"ffn_down.weight", TensorType::kQ6_K}})
                                               .Label("llama_mixed"),
                                           // mixtures of experts: Mixtral-style llama, granitemoe (its
                                           // multipliers), olmoe (whole-vector q/k norms, weights as
                                           // routed), qwen2moe (shared expert, biases), qwen3moe; in
                                           // float16, Q8_0 and K blocks
                                           TinyCase("llama", TensorType::kF16).Experts(4, 2, 64).Label("mixtral"),
                                           TinyCase("granitemoe", TensorType::kQ8_0)
                                               .Experts(6, 2, 64)
                                               .Keys({{"embedding_scale", 12.0f}, {"attention.scale", 0.015625f},
                                                      {"residual_scale", 0.22f}, {"logit_scale", 6.0f}}),
                                           TinyCase("olmoe", TensorType::kQ4_1).Experts(8, 3, 32),
                                           TinyCase("qwen2moe", TensorType::kQ8_0).Experts(4, 2, 64, 96),
                                           TinyCase("qwen3moe", TensorType::kQ4_K).Wide().Experts(8, 2, 256),
                                           TinyCase("olmoe", TensorType::kQ3_K).Wide().Experts(8, 3, 256),
                                           TinyCase("granite", TensorType::kQ4_1)
                                               .Keys({{"embedding_scale", 12.0f}, {"attention.scale", 0.0078125f},
                                                      {"residual_scale", 0.22f}, {"logit_scale", 8.0f}})),
                         [](const auto& info) {
                           const std::string name = info.param.label.empty() ? info.param.architecture : info.param.label;
                           return name + "_" + TensorTypeName(info.param.type);
                         });

// A GPU backend under a memory budget with the built-in expert placement, given `usage`;
// `seen` receives the facts the placement was asked with.
absl::StatusOr<std::unique_ptr<CudaBackend>> BudgetedGpu(const Model& model, uint64_t budget, const ExpertUsage& usage,
                                                         ExpertPlacementFacts* seen) {
  CudaBackendOptions options;
  options.kv_capacity_tokens = 1024;
  options.max_sequences = 8;
  options.memory_budget_bytes = budget;
  options.host_threads = 2;
  options.expert_usage = usage;
  options.place_experts = [seen](const ExpertPlacementFacts& facts) {
    *seen = facts;
    return PlaceExpertsWithinBudget(facts);
  };
  return CudaBackend::Create(model, options);
}

// A GPU memory budget on mixture-of-experts models: every placement, (a) all experts on the
// GPU, (b) every routed expert on the host, (c) about half of them, gives the CPU f32
// path's greedy tokens, and the device never holds more than the budget. A budget below
// what the GPU must hold is a clear error at load.
TEST(CudaExpertPlacementTest, EveryPlacementMatchesTheCpuF32PathWithinItsBudget) {
  HETERO_SKIP_WITHOUT_GPU();
  struct Shape {
    std::string architecture;
    TensorType type;
    int experts, used, ff, shared_ff;
  };
  for (const Shape& shape : {Shape{"qwen2moe", TensorType::kQ8_0, 4, 2, 64, 96},
                             Shape{"olmoe", TensorType::kQ4_1, 8, 3, 32, 0},
                             Shape{"llama", TensorType::kF16, 4, 2, 64, 0}}) {
    testing::TinyModelOptions o;
    o.architecture = shape.architecture;
    o.weight_type = shape.type;
    o.n_embd = 128;
    o.n_heads = 4;
    o.n_kv_heads = 2;
    o.n_ff = 160;
    o.n_experts = shape.experts;
    o.n_experts_used = shape.used;
    o.n_ff_expert = shape.ff;
    o.n_ff_shared = shape.shared_ff;
    const std::string path = testing::WriteTinyModel(o, "cuda_budget_" + o.architecture + ".gguf");
    auto model = Model::Load(path);
    ASSERT_TRUE(model.ok()) << model.status();
    auto cpu = CpuReference(**model);
    ASSERT_TRUE(cpu);
    ExpertPlacementFacts seen;
    const auto make = [&](uint64_t budget) { return BudgetedGpu(**model, budget, {}, &seen); };
    {
      auto all = make(uint64_t{1} << 40);
      ASSERT_TRUE(all.ok()) << all.status();
    }
    ASSERT_FALSE(seen.layers.empty());
    uint64_t expert_bytes = 0;
    for (const ExpertLayerFacts& l : seen.layers) expert_bytes += l.experts * l.bytes_per_expert;
    const uint64_t fixed = seen.fixed_bytes;
    for (const auto& [label, budget] : std::vector<std::pair<std::string, uint64_t>>{
             {"all experts on the gpu", fixed + expert_bytes},
             {"routed experts on the cpu", fixed},
             {"about half on the gpu", fixed + expert_bytes / 2}}) {
      auto gpu = make(budget);
      ASSERT_TRUE(gpu.ok()) << label << ": " << gpu.status();
      EXPECT_LE((*gpu)->info().weight_bytes, budget) << label;
      std::printf("%s %s, %s: %s; %llu of a budget of %llu bytes\n", o.architecture.c_str(),
                  TensorTypeName(o.weight_type).c_str(), label.c_str(), (*gpu)->info().weight_format.c_str(),
                  static_cast<unsigned long long>((*gpu)->info().weight_bytes), static_cast<unsigned long long>(budget));
      for (int length : {1, 9, 37, 100}) {  // 100: past the captured decode shapes
        const Comparison c = CompareGreedy(**gpu, *cpu, RandomTokens(length, o.n_vocab, length + 3), 12);
        EXPECT_EQ(c.equal_steps, 12) << label << ", prompt " << length;
        EXPECT_LE(c.worst_l2, 2e-2) << label << ", prompt " << length;
      }
    }
    auto too_small = make(fixed - 1);
    ASSERT_FALSE(too_small.ok());
    EXPECT_EQ(too_small.status().code(), absl::StatusCode::kResourceExhausted) << too_small.status();
  }
}

// Earlier runs' usage (CudaBackendOptions::expert_usage, from EngineOptions::
// expert_usage_path) reaches the placement's facts, and the GPU counts every layer's choices
// (on the device, the host's experts included) as the CPU counts the same tokens' choices.
TEST(CudaExpertPlacementTest, UsageReachesThePlacementAndTheHostPathCountsChoices) {
  HETERO_SKIP_WITHOUT_GPU();
  testing::TinyModelOptions o;
  o.architecture = "olmoe";
  o.weight_type = TensorType::kQ4_1;
  o.n_embd = 128;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.n_experts = 8;
  o.n_experts_used = 3;
  o.n_ff_expert = 32;
  auto model = Model::Load(testing::WriteTinyModel(o, "cuda_usage_olmoe.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto cpu = CpuReference(**model);
  ASSERT_TRUE(cpu);
  // Usage from a CPU run of one prompt.
  {
    std::vector<float> logits(o.n_vocab);
    const SequenceId seq = *cpu->NewSequence();
    ASSERT_TRUE(cpu->Prefill(seq, RandomTokens(41, o.n_vocab, 5), absl::MakeSpan(logits)).ok());
    cpu->FreeSequence(seq);
  }
  const ExpertUsage measured = cpu->expert_usage();
  ASSERT_EQ(measured.layers.size(), static_cast<size_t>(o.n_layers));
  ExpertPlacementFacts seen;
  const auto make = [&](uint64_t budget) { return BudgetedGpu(**model, budget, measured, &seen); };
  { ASSERT_TRUE(make(uint64_t{1} << 40).ok()); }
  ASSERT_EQ(seen.layers.size(), measured.layers.size());
  uint64_t expert_bytes = 0;
  for (size_t i = 0; i < seen.layers.size(); ++i) {
    EXPECT_EQ(seen.layers[i].usage, std::vector<double>(measured.layers[i].evaluations.begin(),
                                                        measured.layers[i].evaluations.end()));
    expert_bytes += seen.layers[i].experts * seen.layers[i].bytes_per_expert;
  }
  auto gpu = make(seen.fixed_bytes + expert_bytes / 2);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const ExpertUsage cpu_before = cpu->expert_usage();
  const Comparison c = CompareGreedy(**gpu, *cpu, RandomTokens(23, o.n_vocab, 9), 8);
  EXPECT_EQ(c.equal_steps, 8);
  const ExpertUsage on_gpu = (*gpu)->expert_usage();
  const ExpertUsage cpu_after = cpu->expert_usage();
  ASSERT_EQ(on_gpu.layers.size(), static_cast<size_t>(o.n_layers));
  for (const ExpertUsage::Layer& l : on_gpu.layers) {
    uint64_t gpu_total = 0, cpu_total = 0;
    for (int e = 0; e < o.n_experts; ++e) {
      const uint64_t want = cpu_after.layers[l.layer].evaluations[e] - cpu_before.layers[l.layer].evaluations[e];
      gpu_total += l.evaluations[e];
      cpu_total += want;
      // A routing near-tie may swap a choice between the devices' sums; none is expected.
      EXPECT_NEAR(static_cast<double>(l.evaluations[e]), static_cast<double>(want), 2.0)
          << "layer " << l.layer << " expert " << e;
    }
    EXPECT_EQ(gpu_total, cpu_total) << "layer " << l.layer;  // every row's choices, on both
  }
}

// Through the engine (the tiny files have no tokenizer, so the default model, dense: the
// budget is checked, nothing placed): a budget too small fails Engine::Create.
TEST(CudaExpertPlacementTest, TheEngineRefusesABudgetTooSmallAtLoad) {
  HETERO_SKIP_WITHOUT_GPU();
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  EngineOptions options;
  options.gpu_memory_budget_bytes = 4096;
  auto engine = Engine::Create(kDefaultModelPath, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kResourceExhausted) << engine.status();
  EXPECT_NE(engine.status().message().find("budget"), std::string::npos) << engine.status();
}

// Gemma 3 270M (Q4_K_M; `bash scripts/setup.sh --model gemma3`, or HETERO_GEMMA3_MODEL) on
// the GPU against the CPU f32 path, on the prompts of its float64 reference
// (tests/data/gemma3_reference.json): the greedy continuations agree up to the first
// step where the CPU's own top-2 margin is below 0.05 (a near-tie either may break), and
// the logits stay within 2e-2 relative L2 while they agree. Its K-quant matrices run as
// float16 on the GPU (no native K-quant kernel there yet), hence the tie margin.
TEST(CudaGemma3Test, MatchesTheCpuF32Path) {
  HETERO_SKIP_WITHOUT_GPU();
  const char* env = std::getenv("HETERO_GEMMA3_MODEL");
  const std::string path = env != nullptr ? env : "models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "Gemma 3 270M not present at " << path << " (run `bash scripts/setup.sh --model gemma3`)";
  }
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuBackendOptions cpu_options;
  cpu_options.threads = std::max(2u, std::thread::hardware_concurrency() / 2);
  cpu_options.precision = CpuPrecision::kF32;
  cpu_options.kv_capacity_tokens = 1024;
  auto cpu = CpuBackend::Create(**model, cpu_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = Gpu(**model);
  ASSERT_TRUE(gpu);
  std::ifstream in(std::string(HETERO_TEST_DATA_DIR) + "/gemma3_reference.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json data = nlohmann::json::parse(in);
  const int V = (*cpu)->vocab_size();
  int prompts = 0;
  for (const auto& j : data["cases"]) {
    const std::vector<int32_t> prompt = j["prompt"].get<std::vector<int32_t>>();
    std::vector<float> lg(V), lc(V);
    auto sg = gpu->NewSequence();
    auto sc = (*cpu)->NewSequence();
    ASSERT_TRUE(sg.ok() && sc.ok());
    ASSERT_TRUE(gpu->Prefill(*sg, prompt, absl::MakeSpan(lg)).ok());
    ASSERT_TRUE((*cpu)->Prefill(*sc, prompt, absl::MakeSpan(lc)).ok());
    int equal = 0;
    double worst_l2 = 0, margin_at_split = -1;
    for (int step = 0; step < 24; ++step) {
      worst_l2 = std::max(worst_l2, RelativeL2(lg, lc));
      const int32_t tg = Argmax(lg), tc = Argmax(lc);
      if (tg != tc) {
        std::vector<float> sorted = lc;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        margin_at_split = sorted[0] - sorted[1];
        EXPECT_LT(margin_at_split, 0.05) << "prompt of " << prompt.size() << " tokens, step " << step;
        break;
      }
      ++equal;
      ASSERT_TRUE(gpu->Decode({&*sg, 1}, {&tg, 1}, absl::MakeSpan(lg)).ok());
      ASSERT_TRUE((*cpu)->Decode({&*sc, 1}, {&tc, 1}, absl::MakeSpan(lc)).ok());
    }
    std::printf("gemma3 prompt %zu: %d equal greedy steps%s, worst relative L2 %.2e\n", prompt.size(), equal,
                margin_at_split >= 0 ? absl::StrFormat(" (then a near-tie, CPU margin %.3f)", margin_at_split).c_str() : "",
                worst_l2);
    EXPECT_LE(worst_l2, 2e-2);
    gpu->FreeSequence(*sg);
    (*cpu)->FreeSequence(*sc);
    ++prompts;
  }
  EXPECT_EQ(prompts, 6);
}

class CudaDefaultModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HETERO_SKIP_WITHOUT_GPU();
    HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
    auto m = Model::Load(kDefaultModelPath);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }
  std::unique_ptr<Model> model_;
};

// Acceptance: logits within 2e-2 of the CPU f32 path, 32 greedy tokens identical, 3 prompts.
TEST_F(CudaDefaultModelTest, MatchesTheCpuF32Path) {
  auto cpu = CpuReference(*model_);
  auto gpu = Gpu(*model_);
  ASSERT_TRUE(cpu && gpu);
  const int V = cpu->vocab_size();
  for (int length : {7, 60, 300}) {
    const Comparison c = CompareGreedy(*gpu, *cpu, RandomTokens(length, V, 100 + length), 32);
    std::printf("default model prompt %d: worst relative L2 %.2e, %d of 32 greedy steps equal\n", length, c.worst_l2,
                c.equal_steps);
    EXPECT_LE(c.worst_l2, 2e-2);
    EXPECT_EQ(c.equal_steps, 32);
  }
}

// Acceptance: a CPU prefill handed to the GPU decodes as an all-GPU run does.
TEST_F(CudaDefaultModelTest, CpuPrefillHandedToTheGpuDecodesAsAllGpu) {
  auto cpu = CpuReference(*model_);
  auto gpu = Gpu(*model_);
  ASSERT_TRUE(cpu && gpu);
  const int V = cpu->vocab_size();
  const std::vector<int32_t> prompt = RandomTokens(45, V, 7);
  std::vector<float> a(V), b(V);
  // All GPU.
  auto ga = gpu->NewSequence();
  ASSERT_TRUE(gpu->Prefill(*ga, prompt, absl::MakeSpan(a)).ok());
  // CPU prefill, KV moved to the GPU.
  auto c = cpu->NewSequence();
  ASSERT_TRUE(cpu->Prefill(*c, prompt, absl::MakeSpan(b)).ok());
  auto saved = cpu->SwapOut(*c);
  ASSERT_TRUE(saved.ok()) << saved.status();
  auto gb = gpu->SwapIn(*saved);
  ASSERT_TRUE(gb.ok()) << gb.status();
  EXPECT_EQ(*gpu->SequenceLength(*gb), 45);
  double worst = RelativeL2(b, a);
  int equal = 0;
  for (int i = 0; i < 32; ++i) {
    const int32_t ta = Argmax(a), tb = Argmax(b);
    if (ta != tb) break;
    ++equal;
    ASSERT_TRUE(gpu->Decode({&*ga, 1}, {&ta, 1}, absl::MakeSpan(a)).ok());
    ASSERT_TRUE(gpu->Decode({&*gb, 1}, {&tb, 1}, absl::MakeSpan(b)).ok());
    worst = std::max(worst, RelativeL2(b, a));
  }
  std::printf("handoff: %d of 32 greedy steps equal, worst relative L2 %.2e\n", equal, worst);
  EXPECT_EQ(equal, 32);
  EXPECT_LE(worst, 2e-2);
  // And back: the GPU's KV continues on the CPU.
  auto back = gpu->SwapOut(*gb);
  ASSERT_TRUE(back.ok()) << back.status();
  auto cb = cpu->SwapIn(*back);
  ASSERT_TRUE(cb.ok()) << cb.status();
  EXPECT_EQ(*cpu->SequenceLength(*cb), 45 + 32);
}

// Batched decode (GEMV up to 32 rows, cuBLAS beyond) equals one sequence at a time.
TEST_F(CudaDefaultModelTest, BatchedDecodeEqualsSingle) {
  auto gpu = Gpu(*model_);
  ASSERT_TRUE(gpu);
  const int V = gpu->vocab_size();
  for (int batch : {8, 32, 40}) {  // GEMV at 8 and 32 rows, cuBLAS at 40
    std::vector<SequenceId> seqs;
    std::vector<int32_t> next(batch);
    std::vector<float> lg(V);
    for (int i = 0; i < batch; ++i) {
      auto seq = gpu->NewSequence();
      ASSERT_TRUE(seq.ok()) << seq.status();
      seqs.push_back(*seq);
      ASSERT_TRUE(gpu->Prefill(seqs.back(), RandomTokens(5 + 3 * i, V, i), absl::MakeSpan(lg)).ok());
      next[i] = Argmax(lg);
    }
    std::vector<float> batched(static_cast<size_t>(batch) * V);
    ASSERT_TRUE(gpu->Decode(seqs, next, absl::MakeSpan(batched)).ok());
    // The same step, one at a time, on copies of the sequences.
    for (int i = 0; i < batch; ++i) {
      ASSERT_TRUE(gpu->TruncateSequence(seqs[i], *gpu->SequenceLength(seqs[i]) - 1).ok());
      ASSERT_TRUE(gpu->Decode({&seqs[i], 1}, {&next[i], 1}, absl::MakeSpan(lg)).ok());
      const double l2 = RelativeL2(absl::MakeConstSpan(batched).subspan(static_cast<size_t>(i) * V, V), lg);
      EXPECT_LE(l2, 1e-2) << "batch " << batch << " row " << i;
    }
    for (SequenceId s : seqs) gpu->FreeSequence(s);
  }
}

// Greedy choices made on the device equal the argmax of the logits, for GEMV and cuBLAS
// batch sizes, and advance the sequences the same way.
TEST_F(CudaDefaultModelTest, DecodeGreedyEqualsTheLogitsArgmax) {
  auto gpu = Gpu(*model_);
  ASSERT_TRUE(gpu);
  const int V = gpu->vocab_size();
  for (int batch : {1, 8, 40}) {
    std::vector<SequenceId> a, b;
    std::vector<float> lg(V);
    std::vector<int32_t> tokens(batch);
    for (int i = 0; i < batch; ++i) {
      const std::vector<int32_t> prompt = RandomTokens(3 + i, V, 50 + i);
      auto sa = gpu->NewSequence();
      auto sb = gpu->NewSequence();
      ASSERT_TRUE(sa.ok() && sb.ok()) << sa.status() << sb.status();
      a.push_back(*sa);
      b.push_back(*sb);
      ASSERT_TRUE(gpu->Prefill(a.back(), prompt, absl::MakeSpan(lg)).ok());
      ASSERT_TRUE(gpu->Prefill(b.back(), prompt, absl::MakeSpan(lg)).ok());
      tokens[i] = Argmax(lg);
    }
    std::vector<float> logits(static_cast<size_t>(batch) * V);
    std::vector<int32_t> greedy(batch);
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE(gpu->Decode(a, tokens, absl::MakeSpan(logits)).ok());
      ASSERT_TRUE(gpu->DecodeGreedy(b, tokens, absl::MakeSpan(greedy)).ok());
      for (int i = 0; i < batch; ++i) {
        EXPECT_EQ(greedy[i], Argmax(absl::MakeConstSpan(logits).subspan(static_cast<size_t>(i) * V, V)))
            << "batch " << batch << " row " << i << " step " << step;
      }
      tokens = greedy;
    }
    EXPECT_EQ(*gpu->SequenceLength(a[0]), *gpu->SequenceLength(b[0]));
    for (SequenceId s : a) gpu->FreeSequence(s);
    for (SequenceId s : b) gpu->FreeSequence(s);
  }
}

// A sequence parked and restored (KV to the host and back) while another decodes: the
// copies run beside the passes, and neither sequence's results change.
TEST_F(CudaDefaultModelTest, SwapsRunBesideOtherSequencesDecoding) {
  auto gpu = Gpu(*model_);
  ASSERT_TRUE(gpu);
  const int V = gpu->vocab_size();
  std::vector<float> lg(V);
  auto greedy_run = [&](SequenceId s, int32_t first, int steps) {
    std::vector<int32_t> out;
    int32_t t = first;
    for (int i = 0; i < steps; ++i) {
      int32_t next = 0;
      EXPECT_TRUE(gpu->DecodeGreedy({&s, 1}, {&t, 1}, {&next, 1}).ok());
      out.push_back(t = next);
    }
    return out;
  };
  const std::vector<int32_t> prompt_a = RandomTokens(30, V, 11), prompt_b = RandomTokens(600, V, 12);
  // Alone.
  SequenceId a = *gpu->NewSequence();
  ASSERT_TRUE(gpu->Prefill(a, prompt_a, absl::MakeSpan(lg)).ok());
  const std::vector<int32_t> alone = greedy_run(a, Argmax(lg), 64);
  gpu->FreeSequence(a);
  SequenceId b = *gpu->NewSequence();
  ASSERT_TRUE(gpu->Prefill(b, prompt_b, absl::MakeSpan(lg)).ok());
  const int32_t b_next = Argmax(lg);
  std::vector<float> b_before(V);
  ASSERT_TRUE(gpu->Decode({&b, 1}, {&b_next, 1}, absl::MakeSpan(b_before)).ok());
  ASSERT_TRUE(gpu->TruncateSequence(b, 600).ok());
  // Together: `a` decodes while `b` goes to the host and back ten times.
  a = *gpu->NewSequence();
  ASSERT_TRUE(gpu->Prefill(a, prompt_a, absl::MakeSpan(lg)).ok());
  const int32_t a_first = Argmax(lg);
  std::vector<int32_t> together;
  std::thread decoder([&] { together = greedy_run(a, a_first, 64); });
  for (int i = 0; i < 10; ++i) {  // no ASSERT while the decoder thread runs
    auto saved = gpu->SwapOut(b);
    EXPECT_TRUE(saved.ok()) << saved.status();
    if (!saved.ok()) break;
    EXPECT_TRUE(saved->data.pinned());
    auto back = gpu->SwapIn(*saved);
    EXPECT_TRUE(back.ok()) << back.status();
    if (!back.ok()) break;
    b = *back;
  }
  decoder.join();
  EXPECT_EQ(together, alone);
  std::vector<float> b_after(V);
  ASSERT_TRUE(gpu->Decode({&b, 1}, {&b_next, 1}, absl::MakeSpan(b_after)).ok());
  EXPECT_EQ(b_after, b_before);  // the same bytes in the same blocks layout: identical logits
}

// Prefix sharing on the device: a sequence attaching another's blocks, then cutting into
// a shared block (copy on write through host memory), gives the logits of a backend that
// shares nothing, and the blocks' owner is unaffected. Tolerances: cuBLAS may sum in
// another order for another row count.
TEST_F(CudaDefaultModelTest, SharedPrefixBlocksAndCopyOnWrite) {
  auto gpu = Gpu(*model_);
  auto plain = Gpu(*model_, 512, /*share_kv_prefixes=*/false);
  ASSERT_TRUE(gpu && plain);
  const int V = gpu->vocab_size();
  const std::vector<int32_t> first = RandomTokens(300, V, 21);
  std::vector<int32_t> second(first.begin(), first.begin() + 200);
  for (int32_t t : RandomTokens(50, V, 22)) second.push_back(t);
  std::vector<float> got(V), want(V);
  const SequenceId a = *gpu->NewSequence();
  ASSERT_TRUE(gpu->Prefill(a, first, absl::MakeSpan(got)).ok());
  const SequenceId b = *gpu->NewSequence();
  auto attached = gpu->AttachCachedPrefix(b, second, static_cast<int>(second.size()) - 1);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(*attached, 192);  // 12 whole blocks before the first difference at 200
  ASSERT_TRUE(gpu->Prefill(b, absl::MakeSpan(second).subspan(192), absl::MakeSpan(got)).ok());
  const SequenceId pb = *plain->NewSequence();
  ASSERT_TRUE(plain->Prefill(pb, second, absl::MakeSpan(want)).ok());
  EXPECT_LE(RelativeL2(got, want), 2e-3);
  EXPECT_EQ(Argmax(got), Argmax(want));
  EXPECT_EQ(gpu->kv_cache_stats().shared_tokens, 192);
  EXPECT_EQ(gpu->kv_used_tokens(), 300 + 250 - 192);
  // Cut b inside its 7th (shared) block and decode: b writes its own copy of the block.
  ASSERT_TRUE(gpu->TruncateSequence(b, 100).ok());
  ASSERT_TRUE(plain->TruncateSequence(pb, 100).ok());
  EXPECT_EQ(gpu->kv_cache_stats().shared_tokens, 96);
  const int32_t next = second[100];
  ASSERT_TRUE(gpu->Decode({&b, 1}, {&next, 1}, absl::MakeSpan(got)).ok());
  ASSERT_TRUE(plain->Decode({&pb, 1}, {&next, 1}, absl::MakeSpan(want)).ok());
  EXPECT_LE(RelativeL2(got, want), 2e-3);
  EXPECT_EQ(Argmax(got), Argmax(want));
  // a still reads what it wrote.
  const SequenceId pa = *plain->NewSequence();
  ASSERT_TRUE(plain->Prefill(pa, first, absl::MakeSpan(want)).ok());
  const int32_t a_next = 77;
  ASSERT_TRUE(gpu->Decode({&a, 1}, {&a_next, 1}, absl::MakeSpan(got)).ok());
  ASSERT_TRUE(plain->Decode({&pa, 1}, {&a_next, 1}, absl::MakeSpan(want)).ok());
  EXPECT_LE(RelativeL2(got, want), 2e-3);
  EXPECT_EQ(Argmax(got), Argmax(want));
  gpu->FreeSequence(a);
  gpu->FreeSequence(b);
  EXPECT_EQ(gpu->kv_used_tokens(), 0);
  EXPECT_EQ(gpu->kv_cache_stats().shared_tokens, 0);
}

// Places Generate (and so the session's KV) on the device set before each turn.
class DeviceByTurnScheduler : public Scheduler {
 public:
  std::string name() const override { return "device-by-turn"; }
  Placement Place(Stage stage, const TaskState&, const SystemSnapshot&) override {
    Placement p;
    p.device = stage == Stage::kGenerate ? device.load() : Device::kCpu;
    p.reason = "test";
    return p;
  }
  std::atomic<Device> device{Device::kGpu};
};

// The engine encodes prompts on the CPU and hands their KV to the GPU to decode (the seed
// design), and a session's KV follows Generate to the CPU and back between turns (handed
// over, not recomputed: the next turn reuses the earlier prompt).
TEST_F(CudaDefaultModelTest, EngineMovesASessionsKvBetweenDevices) {
  auto scheduler = std::make_shared<DeviceByTurnScheduler>();
  EngineOptions o;
  o.custom_scheduler = scheduler;
  o.kv_capacity_tokens = 4096;
  auto engine = Engine::Create(kDefaultModelPath, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto session = (*engine)->NewSession();
  ASSERT_TRUE(session.ok());
  RunOptions run;
  run.max_tokens = 12;
  int previous_prompt = 0;
  for (Device d : {Device::kGpu, Device::kCpu, Device::kGpu}) {
    scheduler->device = d;
    auto result = (*session)->Run(previous_prompt == 0 ? "What is the capital of France?" : "And of Italy?", run);
    ASSERT_TRUE(result.ok()) << result.status();
    const TaskReport& r = result->report;
    ASSERT_EQ(r.stages.size(), 2u);
    EXPECT_EQ(r.stages[0].device, Device::kCpu);  // Understand encodes on the CPU...
    EXPECT_EQ(r.stages[1].device, d);               // ...and Generate decodes where placed
    if (d == Device::kGpu) {
      EXPECT_THAT(r.stages[0].reason, ::testing::HasSubstr("KV handed to the gpu")) << r.stages[0].reason;
    }
    EXPECT_GT(r.generated_tokens, 0);
    EXPECT_FALSE(result->text.empty());
    if (previous_prompt > 0) {
      EXPECT_GT(r.reused_prompt_tokens, previous_prompt) << "the KV was recomputed";
    }
    std::printf("turn on %s: %d prompt tokens, %d reused, reply '%s'\n", d == Device::kGpu ? "gpu" : "cpu",
                r.prompt_tokens, r.reused_prompt_tokens, result->text.c_str());
    previous_prompt = r.prompt_tokens;
  }
}

// A prompt longer than one pass runs in several and gives the single-pass logits.
TEST_F(CudaDefaultModelTest, PromptInSeveralPassesEqualsOnePass) {
  auto one = Gpu(*model_, 512);
  auto several = Gpu(*model_, 64);
  ASSERT_TRUE(one && several);
  const int V = one->vocab_size();
  const std::vector<int32_t> prompt = RandomTokens(200, V, 3);
  std::vector<float> a(V), b(V);
  auto sa = one->NewSequence();
  auto sb = several->NewSequence();
  ASSERT_TRUE(one->Prefill(*sa, prompt, absl::MakeSpan(a)).ok());
  ASSERT_TRUE(several->Prefill(*sb, prompt, absl::MakeSpan(b)).ok());
  EXPECT_LE(RelativeL2(b, a), 1e-2);
}

TEST_F(CudaDefaultModelTest, RefusesBadInput) {
  auto gpu = Gpu(*model_);
  ASSERT_TRUE(gpu);
  const int V = gpu->vocab_size();
  std::vector<float> lg(V);
  auto s = gpu->NewSequence();
  const int32_t bad = V;
  absl::Status st = gpu->Prefill(*s, {&bad, 1}, absl::MakeSpan(lg));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(*gpu->SequenceLength(*s), 0);  // unchanged
  const int32_t ok = 1;
  EXPECT_FALSE(gpu->Prefill(12345, {&ok, 1}, absl::MakeSpan(lg)).ok());
  EXPECT_FALSE(gpu->Decode({&*s, 1}, {&ok, 1}, absl::MakeSpan(lg).subspan(0, 10)).ok());
  SavedSequence wrong;
  wrong.tokens = 3;
  wrong.data = *HostMemoryPool::Default()->Allocate(7);
  EXPECT_EQ(gpu->SwapIn(wrong).status().code(), absl::StatusCode::kInvalidArgument);
  // Still usable.
  EXPECT_TRUE(gpu->Prefill(*s, {&ok, 1}, absl::MakeSpan(lg)).ok());
}

}  // namespace
}  // namespace hetero
