// Mixtures of experts on the CPU beyond the float64 model reference (cpu_backend_test):
// the block against a float64 implementation written here, routing ties, and the
// guarantees batching relies on: a token's result does not depend on the other tokens of
// its step, in decode batches or in a prompt cut into passes.
#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "hetero/model.h"
#include "src/cpu/cpu_backend.h"
#include "src/cpu/experts.h"
#include "src/runtime/device_worker.h"
#include "src/runtime/gguf.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

constexpr int kEmbd = 40, kExperts = 5, kUsed = 2, kFf = 24, kSharedFf = 12, kRows = 7;

std::vector<float> Random(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

struct Block {
  std::vector<float> router, gate, up, down;  // ggml layouts: router [kEmbd, kExperts], ...
  std::vector<float> shared_input, shared_gate, shared_up, shared_down;
};

Block RandomBlock(bool zero_router, std::mt19937& rng) {
  Block b;
  b.router = zero_router ? std::vector<float>(kEmbd * kExperts, 0.0f) : Random(kEmbd * kExperts, 0.5f, rng);
  b.gate = Random(kEmbd * kFf * kExperts, 0.3f, rng);
  b.up = Random(kEmbd * kFf * kExperts, 0.3f, rng);
  b.down = Random(kFf * kEmbd * kExperts, 0.3f, rng);
  b.shared_input = Random(kEmbd, 0.5f, rng);
  b.shared_gate = Random(kEmbd * kSharedFf, 0.3f, rng);
  b.shared_up = Random(kEmbd * kSharedFf, 0.3f, rng);
  b.shared_down = Random(kSharedFf * kEmbd, 0.3f, rng);
  return b;
}

std::vector<uint8_t> BlockFile(const Block& b) {
  testing::GgufBuilder g;
  g.AddString("general.architecture", "test");
  g.AddTensorF32("router", {kEmbd, kExperts}, b.router);
  g.AddTensorF32("gate", {kEmbd, kFf, kExperts}, b.gate);
  g.AddTensorF32("up", {kEmbd, kFf, kExperts}, b.up);
  g.AddTensorF32("down", {kFf, kEmbd, kExperts}, b.down);
  g.AddTensorF32("shared_input", {kEmbd}, b.shared_input);
  g.AddTensorF32("shared_gate", {kEmbd, kSharedFf}, b.shared_gate);
  g.AddTensorF32("shared_up", {kEmbd, kSharedFf}, b.shared_up);
  g.AddTensorF32("shared_down", {kSharedFf, kEmbd}, b.shared_down);
  return g.Build();
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// out += weight * down(silu(gate h) * up h), matrices row-major [outputs][inputs] at `w`.
void AddFfn(const float* gate, const float* up, const float* down, int ff, const float* h, double weight,
            std::vector<double>& out) {
  std::vector<double> act(ff);
  for (int j = 0; j < ff; ++j) {
    double g = 0, u = 0;
    for (int i = 0; i < kEmbd; ++i) {
      g += static_cast<double>(gate[j * kEmbd + i]) * h[i];
      u += static_cast<double>(up[j * kEmbd + i]) * h[i];
    }
    act[j] = Silu(g) * u;
  }
  for (int i = 0; i < kEmbd; ++i) {
    double y = 0;
    for (int j = 0; j < ff; ++j) y += static_cast<double>(down[i * ff + j]) * act[j];
    out[i] += weight * y;
  }
}

// Row r's choice in float64, from the definition's words: softmax over the router's
// logits, the kUsed most probable (ties to the lower id), ascending by id, with their
// weights renormalised or not.
std::vector<std::pair<int, double>> Choose(const Block& b, const float* x, bool normalize) {
    std::vector<double> p(kExperts);
    double top = -1e300, sum = 0;
    for (int e = 0; e < kExperts; ++e) {
      double l = 0;
      for (int i = 0; i < kEmbd; ++i) l += static_cast<double>(b.router[e * kEmbd + i]) * x[i];
      p[e] = l;
      top = std::max(top, l);
    }
    for (double& v : p) sum += v = std::exp(v - top);
    for (double& v : p) v /= sum;
    std::vector<int> order(kExperts);
    for (int e = 0; e < kExperts; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return p[a] > p[c]; });
    std::sort(order.begin(), order.begin() + kUsed);
    double chosen = 0;
    for (int i = 0; i < kUsed; ++i) chosen += p[order[i]];
    std::vector<std::pair<int, double>> out;
    for (int i = 0; i < kUsed; ++i) out.emplace_back(order[i], normalize ? p[order[i]] / chosen : p[order[i]]);
    return out;
}

// The block in float64: the chosen experts' weighted sum (Choose), plus the shared expert
// times sigmoid(h . shared_input).
std::vector<double> Reference(const Block& b, const std::vector<float>& h, bool normalize, bool shared) {
  std::vector<double> out(static_cast<size_t>(kRows) * kEmbd, 0.0);
  for (int r = 0; r < kRows; ++r) {
    const float* x = h.data() + r * kEmbd;
    std::vector<double> row(kEmbd, 0.0);
    for (const auto& [e, weight] : Choose(b, x, normalize)) {
      const size_t m = static_cast<size_t>(e) * kFf * kEmbd;
      AddFfn(b.gate.data() + m, b.up.data() + m, b.down.data() + m, kFf, x, weight, row);
    }
    if (shared) {
      double dot = 0;
      for (int i = 0; i < kEmbd; ++i) dot += static_cast<double>(b.shared_input[i]) * x[i];
      AddFfn(b.shared_gate.data(), b.shared_up.data(), b.shared_down.data(), kSharedFf, x, 1.0 / (1.0 + std::exp(-dot)),
             row);
    }
    std::copy(row.begin(), row.end(), out.begin() + r * kEmbd);
  }
  return out;
}

// The test block's tensors (BlockFile) as an experts definition.
ExpertsDefinition BlockDefinition(bool normalize, bool shared) {
  ExpertsDefinition d;
  d.router = "router";
  d.gate = "gate";
  d.up = "up";
  d.down = "down";
  d.count = kExperts;
  d.used = kUsed;
  d.n_ff = kFf;
  d.normalize_weights = normalize;
  if (shared) {
    d.shared_gate_input = "shared_input";
    d.shared_gate = "shared_gate";
    d.shared_up = "shared_up";
    d.shared_down = "shared_down";
    d.shared_n_ff = kSharedFf;
  }
  return d;
}

void CheckBlock(bool zero_router, bool normalize, bool shared) {
  std::mt19937 rng(zero_router * 4 + normalize * 2 + shared + 7);
  const Block block = RandomBlock(zero_router, rng);
  const std::vector<uint8_t> bytes = BlockFile(block);
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const ExpertsDefinition d = BlockDefinition(normalize, shared);
  LinearContext dnnl;
  auto experts = CpuExperts::Create(
      **file, d, FfnActivation::kSilu,
      [&](const GgufTensorInfo& t) { return MakeOneDnnLinear(dnnl, t, MatmulPrecision::kF32); });
  ASSERT_TRUE(experts.ok()) << experts.status();
  const std::vector<float> h = Random(static_cast<size_t>(kRows) * kEmbd, 1.5f, rng);
  std::vector<float> out(h.size());
  LinearScratch scratch;
  ASSERT_TRUE((*experts)->Forward(h.data(), kRows, out.data(), scratch).ok());
  const std::vector<double> want = Reference(block, h, normalize, shared);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (out[i] - want[i]) * (out[i] - want[i]);
    norm += want[i] * want[i];
  }
  // f32 products of 40 and 24 terms against float64: ~1e-7 measured.
  EXPECT_LE(std::sqrt(diff / norm), 1e-5) << "zero router " << zero_router << ", normalize " << normalize
                                          << ", shared " << shared;
  // Each expert's usage is how many rows the float64 routing chose it for.
  std::vector<uint64_t> chosen(kExperts, 0);
  for (int r = 0; r < kRows; ++r) {
    for (const auto& [e, weight] : Choose(block, h.data() + r * kEmbd, normalize)) ++chosen[e];
  }
  EXPECT_EQ((*experts)->usage(), chosen);
  if (zero_router) {  // all equally probable: the lowest ids, every row
    EXPECT_EQ((*experts)->usage()[0], static_cast<uint64_t>(kRows));
    EXPECT_EQ((*experts)->usage()[1], static_cast<uint64_t>(kRows));
    EXPECT_EQ((*experts)->usage()[kExperts - 1], 0u);
  }
}

TEST(CpuExpertsTest, MatchesAFloat64Implementation) {
  for (bool normalize : {false, true}) {
    for (bool shared : {false, true}) CheckBlock(/*zero_router=*/false, normalize, shared);
  }
}

TEST(CpuExpertsTest, EqualProbabilitiesChooseTheLowerExpertIds) {
  CheckBlock(/*zero_router=*/true, /*normalize=*/false, /*shared=*/false);
  CheckBlock(/*zero_router=*/true, /*normalize=*/true, /*shared=*/true);
}

// The GPU's experts on the host: two blocks holding the even and the odd experts, each
// given the same choices, sum to the float64 routed sum; the shared expert is not added.
TEST(CpuExpertsTest, ChosenExpertsSplitAcrossTwoHoldersSumToTheReference) {
  std::mt19937 rng(31);
  const Block block = RandomBlock(/*zero_router=*/false, rng);
  const std::vector<uint8_t> bytes = BlockFile(block);
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const ExpertsDefinition d = BlockDefinition(/*normalize=*/true, /*shared=*/true);  // ForwardChosen leaves the shared one out
  LinearContext dnnl;
  const auto make = [&](const GgufTensorInfo& t) { return MakeOneDnnLinear(dnnl, t, MatmulPrecision::kF32); };
  std::vector<bool> even(kExperts), odd(kExperts);
  for (int e = 0; e < kExperts; ++e) (e % 2 == 0 ? even : odd)[e] = true;
  auto evens = CpuExperts::Create(**file, d, FfnActivation::kSilu, make, &even);
  auto odds = CpuExperts::Create(**file, d, FfnActivation::kSilu, make, &odd);
  ASSERT_TRUE(evens.ok() && odds.ok());
  EXPECT_EQ((*evens)->matrices().size(), 3u * ((kExperts + 1) / 2) + 3);  // the even experts, and the shared one
  const std::vector<float> h = Random(static_cast<size_t>(kRows) * kEmbd, 1.5f, rng);
  std::vector<int32_t> choices;
  std::vector<float> weights;
  for (int r = 0; r < kRows; ++r) {
    for (const auto& [e, w] : Choose(block, h.data() + r * kEmbd, /*normalize=*/true)) {
      choices.push_back(e);
      weights.push_back(static_cast<float>(w));
    }
  }
  std::vector<float> a(h.size(), 7.0f), b(h.size(), 7.0f);  // overwritten, not added to
  LinearScratch scratch;
  ASSERT_TRUE((*evens)->ForwardChosen(h.data(), kRows, choices.data(), weights.data(), even, a.data(), scratch).ok());
  ASSERT_TRUE((*odds)->ForwardChosen(h.data(), kRows, choices.data(), weights.data(), odd, b.data(), scratch).ok());
  const std::vector<double> want = Reference(block, h, /*normalize=*/true, /*shared=*/false);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = static_cast<double>(a[i]) + b[i];
    diff += (got - want[i]) * (got - want[i]);
    norm += want[i] * want[i];
  }
  EXPECT_LE(std::sqrt(diff / norm), 1e-5);
  // The device that chose counts the choices; the holders add none.
  EXPECT_EQ((*evens)->usage(), std::vector<uint64_t>(kExperts, 0));
  EXPECT_EQ((*odds)->usage(), std::vector<uint64_t>(kExperts, 0));
  // An expert the block was not created with, or an id out of range, is an error.
  EXPECT_FALSE((*evens)->ForwardChosen(h.data(), kRows, choices.data(), weights.data(), odd, a.data(), scratch).ok());
  std::vector<int32_t> bad = choices;
  bad[0] = kExperts;
  EXPECT_FALSE((*evens)->ForwardChosen(h.data(), kRows, bad.data(), weights.data(), even, a.data(), scratch).ok());
}

CpuBackendOptions OneThread() {
  CpuBackendOptions options;
  options.threads = 1;
  return options;
}

testing::TinyModelOptions QuantizedMoe() {
  testing::TinyModelOptions o;
  o.architecture = "qwen3moe";
  o.weight_type = TensorType::kQ8_0;
  o.n_experts = 8;
  o.n_experts_used = 2;
  o.n_ff_expert = 64;
  o.n_vocab = 90;
  return o;
}

// Three sequences decoded together (their tokens choosing different experts) give the
// logits each gets alone.
TEST(CpuExpertsTest, BatchedDecodeEqualsSingle) {
  const testing::TinyModelOptions o = QuantizedMoe();
  auto model = Model::Load(testing::WriteTinyModel(o, "moe_batched.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto backend = CpuBackend::Create(**model, OneThread());
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int V = o.n_vocab;
  std::vector<SequenceId> seqs;
  std::vector<float> logits(V);
  for (int i = 0; i < 3; ++i) {
    seqs.push_back(*(*backend)->NewSequence());
    const std::vector<int32_t> prompt = {1 + 20 * i, 7 + i, 50 - 9 * i, 4 + 3 * i};
    ASSERT_TRUE((*backend)->Prefill(seqs.back(), prompt, absl::MakeSpan(logits)).ok());
  }
  const std::vector<int32_t> next = {5, 61, 33};
  std::vector<float> batched(3 * V);
  ASSERT_TRUE((*backend)->Decode(seqs, next, absl::MakeSpan(batched)).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*backend)->TruncateSequence(seqs[i], 4).ok());
    std::vector<float> single(V);
    ASSERT_TRUE((*backend)->Decode({&seqs[i], 1}, {&next[i], 1}, absl::MakeSpan(single)).ok());
    EXPECT_EQ(std::vector<float>(batched.begin() + i * V, batched.begin() + (i + 1) * V), single) << "sequence " << i;
  }
}

// Every token runs `used` routed experts in every layer; the CPU backend counts them per
// sequence, and a job's counts split into its Understand (prefill) and Generate stages.
TEST(CpuExpertsTest, ExpertEvaluationsAreCountedPerSequenceAndStage) {
  const testing::TinyModelOptions o = QuantizedMoe();
  auto model = Model::Load(testing::WriteTinyModel(o, "moe_traffic.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto backend = CpuBackend::Create(**model, OneThread());
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int64_t per_token = static_cast<int64_t>(o.n_layers) * o.n_experts_used;
  std::vector<float> logits(o.n_vocab);
  const SequenceId a = *(*backend)->NewSequence(), b = *(*backend)->NewSequence();
  ASSERT_TRUE((*backend)->Prefill(a, std::vector<int32_t>{3, 14, 15, 9, 26}, absl::MakeSpan(logits)).ok());
  EXPECT_EQ((*backend)->expert_traffic(a).cpu_evaluations, 5 * per_token);
  EXPECT_EQ((*backend)->expert_traffic(b).cpu_evaluations, 0);
  std::vector<float> two(2 * o.n_vocab);
  const std::vector<SequenceId> seqs = {a, b};
  ASSERT_TRUE((*backend)->Decode(seqs, std::vector<int32_t>{5, 35}, absl::MakeSpan(two)).ok());
  EXPECT_EQ((*backend)->expert_traffic(a).cpu_evaluations, 6 * per_token);
  EXPECT_EQ((*backend)->expert_traffic(b).cpu_evaluations, per_token);
  EXPECT_EQ((*backend)->expert_traffic(a).gpu_evaluations, 0);
  EXPECT_EQ((*backend)->expert_traffic(a).bytes_moved, 0u);
  (*backend)->FreeSequence(a);
  EXPECT_EQ((*backend)->expert_traffic(a).cpu_evaluations, 0);

  GenerationJob job;
  job.prefill_end = job.finished = Clock::now();
  job.experts_at_prefill_start = {10, 0, 0, 0};
  job.experts_at_prefill_end = {10 + 5 * per_token, 0, 0, 0};
  job.experts_at_finish = {10 + 9 * per_token, 2, 64, 0.5};
  StageReport understand, generate;
  ReportExpertTraffic(job, &understand, &generate);
  EXPECT_EQ(understand.cpu_expert_evaluations, 5 * per_token);
  EXPECT_EQ(generate.cpu_expert_evaluations, 4 * per_token);
  EXPECT_EQ(generate.gpu_expert_evaluations, 2);
  EXPECT_EQ(generate.expert_bytes_moved, 64u);
  EXPECT_DOUBLE_EQ(generate.expert_wait_ms, 0.5);
  GenerationJob failed;  // no prefill finished: nothing counted for either stage
  failed.finished = Clock::now();
  failed.experts_at_finish = {7, 0, 0, 0};
  StageReport u2, g2;
  ReportExpertTraffic(failed, &u2, &g2);
  EXPECT_EQ(u2.cpu_expert_evaluations + g2.cpu_expert_evaluations, 0);
}

// A prompt encoded in one pass or cut into two gives bit-identical logits: how a pass's
// tokens are grouped by expert does not change any token's sums.
TEST(CpuExpertsTest, PromptSplitIntoPassesGivesBitIdenticalLogits) {
  const testing::TinyModelOptions o = QuantizedMoe();
  auto model = Model::Load(testing::WriteTinyModel(o, "moe_split.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto backend = CpuBackend::Create(**model, OneThread());
  ASSERT_TRUE(backend.ok()) << backend.status();
  CpuBackend& b = **backend;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 41; ++i) prompt.push_back((i * 37 + 11) % o.n_vocab);
  std::vector<float> whole(o.n_vocab), split(o.n_vocab);
  const SequenceId one_pass = *b.NewSequence();
  ASSERT_TRUE(b.Prefill(one_pass, prompt, absl::MakeSpan(whole)).ok());
  for (size_t cut : {1u, 16u, 29u, 40u}) {
    const SequenceId s = *b.NewSequence();
    ASSERT_TRUE(b.Prefill(s, absl::MakeSpan(prompt).subspan(0, cut), absl::MakeSpan(split)).ok());
    ASSERT_TRUE(b.Prefill(s, absl::MakeSpan(prompt).subspan(cut), absl::MakeSpan(split)).ok());
    EXPECT_EQ(split, whole) << "split after " << cut << " tokens";
    b.FreeSequence(s);
  }
}

}  // namespace
}  // namespace hetero
