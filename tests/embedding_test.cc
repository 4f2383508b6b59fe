// Engine::Embed / CpuBackend::Embed: the pooled final-norm hidden states, checked against
// the logits (which are the output matrix times those states) with a float64 product; the
// same vectors whether inputs come alone or batched; bad input refused with nothing held.
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "src/cpu/cpu_backend.h"
#include "src/runtime/model_impl.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;

struct TinySetup {
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuBackend> backend;
};

TinySetup MakeTiny() {
  testing::TinyModelOptions o;
  o.n_vocab = 97;
  o.n_embd = 48;
  o.n_ff = 80;
  o.seed = 5;
  TinySetup t;
  auto model = Model::Load(testing::WriteTinyModel(o, "embedding_tiny.gguf"));
  EXPECT_TRUE(model.ok()) << model.status();
  t.model = std::move(*model);
  CpuBackendOptions b;
  b.threads = 1;
  b.precision = CpuPrecision::kF32;
  b.max_sequences = 4;
  auto backend = CpuBackend::Create(*t.model, b);
  EXPECT_TRUE(backend.ok()) << backend.status();
  t.backend = std::move(*backend);
  return t;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int32_t& id : t) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

TEST(EmbeddingTest, PooledHiddenStatesMatchTheLogits) {
  TinySetup t = MakeTiny();
  const ModelConfig& c = t.model->config();
  const int E = c.n_embd, V = c.n_vocab;
  // Tied embeddings: the output matrix is token_embd (F32, V x E).
  const GgufTensorInfo* w = t.model->impl().gguf->FindTensor("token_embd.weight");
  ASSERT_NE(w, nullptr);
  const float* W = reinterpret_cast<const float*>(w->data.data());
  std::mt19937 rng(3);
  for (int n : {1, 7, 13, 30}) {
    const std::vector<int32_t> tokens = RandomTokens(rng, n, V);
    std::vector<float> logits(static_cast<size_t>(n) * V);
    auto seq = t.backend->NewSequence();
    ASSERT_TRUE(seq.ok());
    ASSERT_TRUE(t.backend->PrefillAllLogits(*seq, tokens, absl::MakeSpan(logits)).ok());
    t.backend->FreeSequence(*seq);
    for (EmbeddingPooling pooling : {EmbeddingPooling::kMean, EmbeddingPooling::kLastToken}) {
      SCOPED_TRACE(::testing::Message() << n << " tokens, " << (pooling == EmbeddingPooling::kMean ? "mean" : "last"));
      auto e = t.backend->Embed({tokens}, pooling);
      ASSERT_TRUE(e.ok()) << e.status();
      const std::vector<float>& v = (*e)[0];
      ASSERT_EQ(static_cast<int>(v.size()), E);
      double norm = 0;
      for (float x : v) norm += static_cast<double>(x) * x;
      EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);
      // The logits pooled the same way are W h for the pooled (unnormalised) h: parallel
      // to W e. Compare directions (relative L2 after the best scale), in float64.
      std::vector<double> reference(V, 0.0), projected(V, 0.0);
      const int from = pooling == EmbeddingPooling::kLastToken ? n - 1 : 0;
      for (int r = from; r < n; ++r) {
        for (int j = 0; j < V; ++j) reference[j] += logits[static_cast<size_t>(r) * V + j];
      }
      for (int j = 0; j < V; ++j) {
        for (int k = 0; k < E; ++k) projected[j] += static_cast<double>(W[static_cast<size_t>(j) * E + k]) * v[k];
      }
      double dot = 0, pp = 0;
      for (int j = 0; j < V; ++j) {
        dot += reference[j] * projected[j];
        pp += projected[j] * projected[j];
      }
      const double scale = dot / pp;
      double err = 0, ref = 0;
      for (int j = 0; j < V; ++j) {
        err += std::pow(reference[j] - scale * projected[j], 2);
        ref += reference[j] * reference[j];
      }
      EXPECT_GT(scale, 0);
      EXPECT_LT(std::sqrt(err / ref), 1e-5);
    }
  }
  EXPECT_EQ(t.backend->kv_used_tokens(), 0);
}

TEST(EmbeddingTest, BatchedEqualsOneByOne) {
  TinySetup t = MakeTiny();
  std::mt19937 rng(9);
  std::vector<std::vector<int32_t>> inputs;
  for (int i = 0; i < 37; ++i) inputs.push_back(RandomTokens(rng, 1 + static_cast<int>(rng() % 61), t.model->config().n_vocab));
  // A live sequence beside: embedding must not disturb it.
  auto live = t.backend->NewSequence();
  ASSERT_TRUE(live.ok());
  std::vector<float> logits(t.model->config().n_vocab);
  const absl::Status prefilled = t.backend->Prefill(*live, inputs[0], absl::MakeSpan(logits));
  ASSERT_TRUE(prefilled.ok()) << prefilled;
  auto batched = t.backend->Embed(inputs, EmbeddingPooling::kMean);  // several forward passes of <= 512 tokens
  ASSERT_TRUE(batched.ok()) << batched.status();
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto alone = t.backend->Embed({inputs[i]}, EmbeddingPooling::kMean);
    ASSERT_TRUE(alone.ok());
    for (size_t k = 0; k < (*alone)[0].size(); ++k) ASSERT_NEAR((*batched)[i][k], (*alone)[0][k], 2e-6) << i;
  }
  EXPECT_EQ(t.backend->kv_used_tokens(), static_cast<int>(inputs[0].size()));
  EXPECT_EQ(*t.backend->SequenceLength(*live), static_cast<int>(inputs[0].size()));
}

TEST(EmbeddingTest, LayersStopsEarly) {
  TinySetup t = MakeTiny();  // 2 layers
  const std::vector<std::vector<int32_t>> input = {{4, 8, 15, 16, 23, 42}};
  auto all = t.backend->Embed(input, EmbeddingPooling::kMean, 0);
  auto two = t.backend->Embed(input, EmbeddingPooling::kMean, 2);
  auto many = t.backend->Embed(input, EmbeddingPooling::kMean, 99);
  auto one = t.backend->Embed(input, EmbeddingPooling::kMean, 1);
  ASSERT_TRUE(all.ok() && two.ok() && many.ok() && one.ok());
  EXPECT_EQ(*two, *all);
  EXPECT_EQ(*many, *all);
  double diff = 0;
  for (size_t k = 0; k < (*one)[0].size(); ++k) diff += std::abs((*one)[0][k] - (*all)[0][k]);
  EXPECT_GT(diff, 1e-3) << "one layer is not the whole model";
  EXPECT_EQ(t.backend->kv_used_tokens(), 0);
}

TEST(EmbeddingTest, RefusesBadInput) {
  TinySetup t = MakeTiny();
  EXPECT_THAT(t.backend->Embed({{1, 2}, {}}, EmbeddingPooling::kMean), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(t.backend->Embed({{1, 100000}}, EmbeddingPooling::kMean), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(t.backend->Embed({std::vector<int32_t>(t.model->config().context_length + 1, 3)}, EmbeddingPooling::kMean),
              StatusIs(absl::StatusCode::kOutOfRange));
  auto empty = t.backend->Embed({}, EmbeddingPooling::kMean);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(t.backend->kv_used_tokens(), 0);
}

TEST(EngineEmbedTest, TextsOnTheDefaultModel) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  EngineOptions o;
  o.threads = 1;
  o.measure_energy = false;
  auto engine = Engine::Create(kDefaultModelPath, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<std::string> texts = {"What is 12 times 7?", "Compute 12 multiplied by 7.",
                                          "Book me a flight to Chicago."};
  auto e = (*engine)->Embed(texts);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 3u);
  auto cosine = [&](int a, int b) {
    double d = 0;
    for (size_t k = 0; k < (*e)[a].size(); ++k) d += static_cast<double>((*e)[a][k]) * (*e)[b][k];
    return d;
  };
  EXPECT_NEAR(cosine(0, 0), 1.0, 1e-5);
  // Two phrasings of one question are closer than a different request.
  EXPECT_GT(cosine(0, 1), cosine(0, 2));
  EXPECT_EQ((*engine)->stats().kv_used_tokens, 0);
}

}  // namespace
}  // namespace hetero
