// Generated tokens (SequenceChunk::generated) in the CPU backend's default mode, on a CPU
// with the AVX-512 VNNI kernels: their products' inputs take two int8 passes
// (quant_matmul.h's remainders), a prompt's one. So a decoded token lands far nearer the
// f32 mode's logits than the same token as a prompt, and a step that mixes the two roles
// gives each chunk what it gets alone. With --precision int8, or the AVX2 and portable
// kernels (HETERO_CPU_ISA caps them), both roles take one pass.
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "src/cpu/cpu_backend.h"
#include "src/cpu/quant_matmul.h"
#include "tests/support/tiny_model.h"
#include "tests/support/relative_l2.h"

namespace hetero {
namespace {

using ::hetero::testing::RelativeL2;

std::unique_ptr<CpuBackend> MakeBackend(const Model& model, CpuPrecision precision, int threads = 1) {
  CpuBackendOptions options;
  options.threads = threads;
  options.precision = precision;
  auto backend = CpuBackend::Create(model, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
}

// A quantized dense model and a mixture of experts (the experts' products too).
class GeneratedTokensTest : public ::testing::TestWithParam<int> {
 protected:
  testing::TinyModelOptions Options() const {
    testing::TinyModelOptions o;
    o.weight_type = TensorType::kQ4_0;
    if (GetParam() == 1) {
      o.architecture = "qwen3moe";
      o.weight_type = TensorType::kQ8_0;
      o.n_experts = 8;
      o.n_experts_used = 2;
      o.n_ff_expert = 64;
    }
    return o;
  }
  // The parameter's model, written under `name`.
  absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& name) const {
    return Model::Load(testing::WriteTinyModel(Options(), name + "_" + std::to_string(GetParam()) + ".gguf"));
  }
};

TEST_P(GeneratedTokensTest, DecodedTokenIsNearerF32ThanThePromptToken) {
  if (!QuantMatmulUsesAvx512()) {
    GTEST_SKIP() << "the AVX-512 VNNI kernels are not in use here (CPU or HETERO_CPU_ISA), so decoded tokens "
                    "take one int8 pass like prompt tokens: there is no finer rounding to measure (the other "
                    "tests here check the one pass)";
  }
  const testing::TinyModelOptions o = Options();
  auto model = LoadModel("generated_tokens");
  ASSERT_TRUE(model.ok()) << model.status();
  auto fast = MakeBackend(**model, CpuPrecision::kAuto);
  auto exact = MakeBackend(**model, CpuPrecision::kF32);
  ASSERT_TRUE(fast && exact);
  const int V = o.n_vocab;
  double worst_decoded = 0, best_prompt = 1e9;
  for (int32_t token : {3, 41, 77}) {
    const std::vector<int32_t> prompt = {token};
    std::vector<float> want(V), as_prompt(V), decoded(V);
    const SequenceId e = *exact->NewSequence();
    ASSERT_TRUE(exact->Prefill(e, prompt, absl::MakeSpan(want)).ok());
    const SequenceId p = *fast->NewSequence();
    ASSERT_TRUE(fast->Prefill(p, prompt, absl::MakeSpan(as_prompt)).ok());
    const SequenceId d = *fast->NewSequence();  // the same token, as the first decoded one
    ASSERT_TRUE(fast->Decode({&d, 1}, prompt, absl::MakeSpan(decoded)).ok());
    worst_decoded = std::max(worst_decoded, RelativeL2(decoded, want));
    best_prompt = std::min(best_prompt, RelativeL2(as_prompt, want));
    exact->FreeSequence(e);
    fast->FreeSequence(p);
    fast->FreeSequence(d);
  }
  // One int8 pass leaves 5.6e-3 (dense) and 7.4e-3 (mixture) here, the second 2.0e-5 and
  // 2.8e-5 (Intel Xeon, AVX-512 VNNI, 2026-12-07): about 280 times less; 20 is the margin.
  std::cout << "relative L2 to f32: prompt token >= " << best_prompt << ", decoded <= " << worst_decoded << "\n";
  EXPECT_GT(best_prompt, 1e-3) << "one int8 pass should be visibly coarse on these weights";
  EXPECT_LT(worst_decoded * 20, best_prompt);
}

TEST_P(GeneratedTokensTest, MixedStepGivesEachChunkWhatItGetsAlone) {
  const testing::TinyModelOptions o = Options();
  auto model = LoadModel("generated_mixed");
  ASSERT_TRUE(model.ok()) << model.status();
  // Three threads: the products' work items, and their sums of row pairs, run concurrently.
  auto backend = MakeBackend(**model, CpuPrecision::kAuto, 3);
  ASSERT_TRUE(backend);
  CpuBackend& b = *backend;
  const int V = o.n_vocab;
  const std::vector<int32_t> head = {5, 9, 12}, tail = {30, 31, 2, 64}, next = {17};
  std::vector<float> scratch(V);
  // Alone: a prompt's tail, and a decoded token.
  const SequenceId p = *b.NewSequence(), d = *b.NewSequence();
  ASSERT_TRUE(b.Prefill(p, head, absl::MakeSpan(scratch)).ok());
  ASSERT_TRUE(b.Prefill(d, head, absl::MakeSpan(scratch)).ok());
  std::vector<float> prompt_alone(V), decoded_alone(V);
  ASSERT_TRUE(b.Prefill(p, tail, absl::MakeSpan(prompt_alone)).ok());
  ASSERT_TRUE(b.Decode({&d, 1}, next, absl::MakeSpan(decoded_alone)).ok());
  // Together, in both orders.
  for (const bool generated_first : {false, true}) {
    ASSERT_TRUE(b.TruncateSequence(p, 3).ok());
    ASSERT_TRUE(b.TruncateSequence(d, 3).ok());
    const SequenceChunk prompt_chunk{p, tail, false}, decoded_chunk{d, next, true};
    std::vector<SequenceChunk> chunks = {prompt_chunk, decoded_chunk};
    if (generated_first) std::swap(chunks[0], chunks[1]);
    std::vector<float> both(2 * static_cast<size_t>(V));
    ASSERT_TRUE(b.Step(chunks, absl::MakeSpan(both)).ok());
    const size_t prompt_at = generated_first ? V : 0, decoded_at = generated_first ? 0 : V;
    EXPECT_EQ(std::vector<float>(both.begin() + prompt_at, both.begin() + prompt_at + V), prompt_alone)
        << (generated_first ? "decoded chunk first" : "prompt chunk first");
    EXPECT_EQ(std::vector<float>(both.begin() + decoded_at, both.begin() + decoded_at + V), decoded_alone)
        << (generated_first ? "decoded chunk first" : "prompt chunk first");
  }
  // The two roles do differ where generated tokens take two passes, or the comparison
  // above would prove nothing; elsewhere they are the same.
  ASSERT_TRUE(b.TruncateSequence(d, 3).ok());
  std::vector<float> next_as_prompt(V);
  ASSERT_TRUE(b.Prefill(d, next, absl::MakeSpan(next_as_prompt)).ok());
  if (QuantMatmulUsesAvx512()) {
    EXPECT_NE(next_as_prompt, decoded_alone);
  } else {
    EXPECT_EQ(next_as_prompt, decoded_alone);
  }
}

// --precision int8: generated tokens take the prompt's one pass, so a decoded token gives
// exactly what the same token gives as a prompt.
TEST_P(GeneratedTokensTest, Int8ModeDecodesWithOnePass) {
  const testing::TinyModelOptions o = Options();
  auto model = LoadModel("generated_int8");
  ASSERT_TRUE(model.ok()) << model.status();
  auto backend = MakeBackend(**model, CpuPrecision::kInt8);
  auto two_passes = MakeBackend(**model, CpuPrecision::kAuto);
  ASSERT_TRUE(backend && two_passes);
  const int V = o.n_vocab;
  const std::vector<int32_t> token = {41};
  std::vector<float> as_prompt(V), decoded(V), decoded_auto(V);
  const SequenceId p = *backend->NewSequence(), d = *backend->NewSequence(), a = *two_passes->NewSequence();
  ASSERT_TRUE(backend->Prefill(p, token, absl::MakeSpan(as_prompt)).ok());
  ASSERT_TRUE(backend->Decode({&d, 1}, token, absl::MakeSpan(decoded)).ok());
  ASSERT_TRUE(two_passes->Decode({&a, 1}, token, absl::MakeSpan(decoded_auto)).ok());
  EXPECT_EQ(decoded, as_prompt);
  EXPECT_EQ(*ParseCpuPrecision("int8"), CpuPrecision::kInt8);
  // hetero-bench's header says which.
  EXPECT_NE(backend->info().weight_format.find("int8 activations, one pass"), std::string::npos)
      << backend->info().weight_format;
  if (QuantMatmulUsesAvx512()) {
    EXPECT_NE(decoded, decoded_auto);
    EXPECT_NE(two_passes->info().weight_format.find("two passes for generated tokens"), std::string::npos)
        << two_passes->info().weight_format;
  } else {  // the default takes one pass here too
    EXPECT_EQ(decoded, decoded_auto);
    EXPECT_NE(two_passes->info().weight_format.find("int8 activations, one pass"), std::string::npos)
        << two_passes->info().weight_format;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GeneratedTokensTest, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param == 0 ? "DenseQ4_0" : "MixtureQ8_0"; });

}  // namespace
}  // namespace hetero
