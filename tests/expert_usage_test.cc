// Expert-usage statistics (include/hetero/scheduler.h's ExpertUsage): the file format and
// its parser against truncated, corrupt and hostile input; the engine's counts on a tiny
// mixture-of-experts model, saved and read back by a later engine; files that do not fit
// the model refused at load; and the counts reaching the placement's facts.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "hetero/scheduler.h"
#include "src/runtime/expert_usage.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

using ::testing::HasSubstr;

ExpertUsage RandomUsage(std::mt19937_64& rng) {
  ExpertUsage u;
  int layer = 0;
  for (int l = 0; l < 5; ++l) {
    layer += 1 + static_cast<int>(rng() % 3);
    ExpertUsage::Layer x{layer, std::vector<uint64_t>(1 + rng() % 70)};
    for (uint64_t& n : x.evaluations) n = rng() >> (rng() % 64);
    u.layers.push_back(std::move(x));
  }
  return u;
}

bool Equal(const ExpertUsage& a, const ExpertUsage& b) {
  if (a.layers.size() != b.layers.size()) return false;
  for (size_t i = 0; i < a.layers.size(); ++i) {
    if (a.layers[i].layer != b.layers[i].layer || a.layers[i].evaluations != b.layers[i].evaluations) return false;
  }
  return true;
}

TEST(ExpertUsageTest, JsonRoundTripsEveryCount) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 20; ++round) {
    const ExpertUsage u = RandomUsage(rng);
    auto back = ParseExpertUsage(ExpertUsageToJson(u));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(Equal(*back, u)) << ExpertUsageToJson(u);
  }
  // The largest count survives (no detour through a double).
  ExpertUsage big{{{3, {~uint64_t{0}, 0, 1}}}};
  auto back = ParseExpertUsage(ExpertUsageToJson(big));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(Equal(*back, big));
}

TEST(ExpertUsageTest, EveryTruncationIsAClearError) {
  std::mt19937_64 rng(9);
  const std::string text = ExpertUsageToJson(RandomUsage(rng));
  // Each proper prefix, save the one that drops only the final newline.
  for (size_t n = 0; n + 1 < text.size(); ++n) {
    auto parsed = ParseExpertUsage(text.substr(0, n));
    ASSERT_FALSE(parsed.ok()) << "prefix of " << n << " bytes";
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("expert usage"));
  }
}

TEST(ExpertUsageTest, CorruptAndHostileDocumentsAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not JSON"},
      {"[1, 2]", "not a JSON object"},
      {"{}", "expert_usage_version"},
      {R"({"expert_usage_version": 2, "layers": []})", "expert_usage_version"},
      {R"({"expert_usage_version": "1", "layers": []})", "expert_usage_version"},
      {R"({"expert_usage_version": 1})", "\"layers\" must be an array"},
      {R"({"expert_usage_version": 1, "layers": {}})", "\"layers\" must be an array"},
      {R"({"expert_usage_version": 1, "layers": [], "extra": 1})", "unknown key \"extra\""},
      {R"({"expert_usage_version": 1, "layers": [7]})", "layers[0] is not an object"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": -1, "evaluations": [1]}]})", "layers[0].layer"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 1.5, "evaluations": [1]}]})", "layers[0].layer"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 65536, "evaluations": [1]}]})", "layers[0].layer"},
      {R"({"expert_usage_version": 1, "layers": [{"evaluations": [1]}]})", "layers[0].layer"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [1], "x": 0}]})", "unknown key \"x\""},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0}]})", "layers[0].evaluations"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": []}]})", "layers[0].evaluations"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [1, -2]}]})", "evaluations[1]"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [0.5]}]})", "evaluations[0]"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [1e30]}]})", "evaluations[0]"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [18446744073709551616]}]})",
       "evaluations[0]"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": ["3"]}]})", "evaluations[0]"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [null]}]})", "evaluations[0]"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 2, "evaluations": [1]}, {"layer": 2, "evaluations": [1]}]})",
       "does not follow layer 2"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 3, "evaluations": [1]}, {"layer": 1, "evaluations": [1]}]})",
       "does not follow layer 3"},
      {std::string(100000, '[') + std::string(100000, ']'), "nested deeper than 4 levels"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [[1]]}]})", "nested deeper"},
      {R"({"expert_usage_version": 1, "expert_usage_version": 1, "layers": []})",
       "the key \"expert_usage_version\" appears twice"},
      {R"({"expert_usage_version": 1, "layers": [{"layer": 0, "layer": 1, "evaluations": [1]}]})",
       "the key \"layer\" appears twice"},
      {std::string("{\"expert_usage_version\": 1, \"layers\": [{\"layer\": 0, \"evaluations\": [") + "\xff\xfe" + "]}]}",
       "not JSON"},
      {R"({"expert_usage_version": 1, "layers": [], "a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": 0})",
       "more than 8 keys"},
  };
  for (const auto& [text, want] : cases) {
    auto parsed = ParseExpertUsage(text);
    ASSERT_FALSE(parsed.ok()) << text.substr(0, 120);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(want)) << text.substr(0, 120);
  }
  // Too many experts in a layer, and too many layers.
  std::string wide = R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [0)";
  for (int i = 0; i < 65536; ++i) wide += ",0";
  EXPECT_THAT(std::string(ParseExpertUsage(wide + "]}]}").status().message()), HasSubstr("1 to 65536 counts"));
  // Refused as read, before the document is built: past 2^21 values in all.
  std::string many = R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [0)";
  for (int i = 0; i < (1 << 21) + 4; ++i) many += ",0";
  EXPECT_THAT(std::string(ParseExpertUsage(many + "]}]}").status().message()), HasSubstr("more than 2097152 values"));
  // An object of a million distinct keys: refused at its ninth, not after storing them all.
  std::string keyed = "{";
  for (int i = 0; i < (1 << 20); ++i) absl::StrAppend(&keyed, i ? "," : "", "\"k", i, "\":0");
  EXPECT_THAT(std::string(ParseExpertUsage(keyed + "}").status().message()), HasSubstr("more than 8 keys"));
  std::string tall = R"({"expert_usage_version": 1, "layers": [)";
  for (int i = 0; i <= 65536; ++i) tall += std::string(i ? "," : "") + "{}";
  EXPECT_THAT(std::string(ParseExpertUsage(tall + "]}").status().message()), HasSubstr("65537 layers"));
}

TEST(ExpertUsageTest, SumsLayerByLayer) {
  const ExpertUsage a{{{1, {1, 2}}, {4, {5, 0, 0}}}};
  const ExpertUsage b{{{0, {7}}, {4, {1, 1, 1}}, {9, {2, 2}}}};
  auto sum = AddExpertUsage(a, b);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_TRUE(Equal(*sum, ExpertUsage{{{0, {7}}, {1, {1, 2}}, {4, {6, 1, 1}}, {9, {2, 2}}}}));
  auto empty = AddExpertUsage({}, a);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(Equal(*empty, a));
  EXPECT_THAT(std::string(AddExpertUsage(a, ExpertUsage{{{4, {1, 1}}}}).status().message()),
              HasSubstr("layer 4 has 3 experts in one count and 2 in the other"));
  EXPECT_THAT(std::string(AddExpertUsage(ExpertUsage{{{0, {~uint64_t{0}}}}}, ExpertUsage{{{0, {1}}}}).status().message()),
              HasSubstr("overflows"));
}

// The placement's facts take each layer's counts by layer index; all-zero counts and counts
// of another size leave the layer uniform.
TEST(ExpertUsageTest, FillsThePlacementFactsByLayer) {
  std::vector<ExpertLayerFacts> facts = {{2, 4, 2, 100, {}}, {5, 4, 2, 100, {9, 9, 9, 9}}, {7, 4, 2, 100, {}},
                                         {8, 4, 2, 100, {}}};
  FillExpertLayerUsage(ExpertUsage{{{2, {3, 0, 1, 0}}, {5, {0, 0, 0, 0}}, {7, {1, 1}}}}, facts);
  EXPECT_EQ(facts[0].usage, (std::vector<double>{3, 0, 1, 0}));
  EXPECT_TRUE(facts[1].usage.empty());
  EXPECT_TRUE(facts[2].usage.empty());
  EXPECT_TRUE(facts[3].usage.empty());
  // And the built-in placement keeps the used experts: room for two of one layer's four.
  ExpertPlacementFacts placement_facts;
  placement_facts.budget_bytes = 1000 + 2 * 100;
  placement_facts.fixed_bytes = 1000;
  placement_facts.layers = {facts[0]};
  auto placement = PlaceExpertsWithinBudget(placement_facts);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->on_gpu[0], (std::vector<bool>{true, false, true, false}));
}

// ---- The engine's counts on a tiny olmoe model (2 layers, 8 experts, 2 per token).

testing::TinyModelOptions TinyMoe() {
  testing::TinyModelOptions o;
  o.architecture = "olmoe";
  o.n_layers = 2;
  o.n_experts = 8;
  o.n_experts_used = 2;
  o.n_ff_expert = 32;
  o.n_vocab = 64;
  return o;
}

// The tiny model with a small SentencePiece vocabulary, which an engine needs to start.
std::string WriteEngineModel(const testing::TinyModelOptions& o, const std::string& name) {
  testing::GgufBuilder b = testing::TinyModelBuilder(o);
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81"};
  std::vector<float> scores = {0, 0, 0, -1};
  std::vector<int32_t> types = {2, 3, 3, 1};
  for (int i = static_cast<int>(tokens.size()); i < o.n_vocab; ++i) {
    tokens.push_back(std::string(1, static_cast<char>('!' + i)));
    scores.push_back(-static_cast<float>(i));
    types.push_back(1);
  }
  b.AddSpmVocabulary(tokens, scores, types);
  return testing::WriteTempFile(b.Build(), name);
}

EngineOptions CpuOnly() {
  EngineOptions o;
  o.threads = 1;
  o.scheduler = "all-cpu";
  o.measure_energy = false;
  return o;
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

uint64_t Sum(const ExpertUsage::Layer& l) {
  uint64_t n = 0;
  for (uint64_t x : l.evaluations) n += x;
  return n;
}

CompletionOptions Greedy(int tokens) {
  CompletionOptions c;
  c.max_tokens = tokens;
  c.ignore_end_of_generation = true;
  c.sampling.temperature = 0;
  return c;
}

TEST(ExpertUsageTest, TheEngineCountsEveryChoiceAndALaterEngineStartsFromTheFile) {
  const testing::TinyModelOptions o = TinyMoe();
  const std::string model = WriteEngineModel(o, "usage_olmoe.gguf");
  const std::string saved = TempPath("usage_olmoe.json");
  std::filesystem::remove(saved);
  ExpertUsage first;
  {
    auto engine = Engine::Create(model, CpuOnly());
    ASSERT_TRUE(engine.ok()) << engine.status();
    ASSERT_EQ((*engine)->expert_usage().layers.size(), 2u);
    EXPECT_EQ(Sum((*engine)->expert_usage().layers[0]), 0u);
    auto done = (*engine)->CompleteTokens({1, 9, 17, 33, 40, 12}, Greedy(5));
    ASSERT_TRUE(done.ok()) << done.status();
    first = (*engine)->expert_usage();
    ASSERT_EQ(first.layers.size(), 2u);
    // Every token the model ran chose o.n_experts_used experts in each layer; the task's
    // report counted the same evaluations per sequence, independently.
    int64_t reported = 0;
    for (const StageReport& s : done->report.stages) reported += s.cpu_expert_evaluations;
    EXPECT_GT(reported, 0);
    EXPECT_EQ(Sum(first.layers[0]), Sum(first.layers[1]));
    EXPECT_EQ(static_cast<int64_t>(Sum(first.layers[0]) + Sum(first.layers[1])), reported);
    EXPECT_EQ(Sum(first.layers[0]) % o.n_experts_used, 0u);
    EXPECT_EQ(first.layers[0].layer, 0);
    EXPECT_EQ(first.layers[1].evaluations.size(), static_cast<size_t>(o.n_experts));
    ASSERT_TRUE((*engine)->SaveExpertUsage(saved).ok());
  }
  EngineOptions again = CpuOnly();
  again.expert_usage_path = saved;
  auto engine = Engine::Create(model, again);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_TRUE(Equal((*engine)->expert_usage(), first));  // the file's counts, nothing run yet
  ASSERT_TRUE((*engine)->CompleteTokens({1, 9, 17, 33, 40, 12}, Greedy(5)).ok());
  // The same greedy task again: the same choices, so every count doubles.
  const ExpertUsage twice = (*engine)->expert_usage();
  ASSERT_EQ(twice.layers.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < o.n_experts; ++e) {
      EXPECT_EQ(twice.layers[l].evaluations[e], 2 * first.layers[l].evaluations[e]) << "layer " << l << " expert " << e;
    }
  }
  EXPECT_FALSE((*engine)->SaveExpertUsage("").ok());
  EXPECT_TRUE(absl::IsNotFound((*engine)->SaveExpertUsage(TempPath("no-such-dir/usage.json"))));
  EXPECT_TRUE(absl::IsInvalidArgument((*engine)->SaveExpertUsage(::testing::TempDir())));  // a directory
}

TEST(ExpertUsageTest, AFileThatDoesNotFitTheModelFailsAtLoad) {
  const testing::TinyModelOptions o = TinyMoe();
  const std::string model = WriteEngineModel(o, "usage_olmoe_fit.gguf");
  const std::string path = TempPath("usage_misfit.json");
  const auto create = [&](const std::string& text) {
    WriteText(path, text);
    EngineOptions options = CpuOnly();
    options.expert_usage_path = path;
    return Engine::Create(model, options).status();
  };
  const std::string eight = "[1,2,3,4,5,6,7,8]";
  absl::Status past = create(R"({"expert_usage_version": 1, "layers": [{"layer": 2, "evaluations": )" + eight + "}]}");
  EXPECT_TRUE(absl::IsInvalidArgument(past));
  EXPECT_THAT(std::string(past.message()), HasSubstr("layer 2 is past the model's 2 layers"));
  EXPECT_THAT(std::string(past.message()), HasSubstr(path));
  absl::Status count = create(R"({"expert_usage_version": 1, "layers": [{"layer": 1, "evaluations": [1,2,3]}]})");
  EXPECT_THAT(std::string(count.message()), HasSubstr("layer 1 counts 3 experts; the model's has 8"));
  absl::Status corrupt = create(R"({"expert_usage_version": 1, "layers": [{"layer": 1, "evaluations": )");
  EXPECT_TRUE(absl::IsInvalidArgument(corrupt));
  EXPECT_THAT(std::string(corrupt.message()), HasSubstr(path));
  EXPECT_TRUE(create(R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": )" + eight + "}]}").ok());
  std::filesystem::remove(path);
  EngineOptions missing = CpuOnly();
  missing.expert_usage_path = path;
  EXPECT_TRUE(absl::IsNotFound(Engine::Create(model, missing).status()));
  missing.expert_usage_path = ::testing::TempDir();  // a directory
  EXPECT_THAT(Engine::Create(model, missing).status().message(), HasSubstr("not a regular file"));
  EXPECT_TRUE(absl::IsNotFound(Engine::Create(model, missing).status()));
  WriteText(path, std::string((16 << 20) + 1, ' '));  // past the size any usage file needs
  missing.expert_usage_path = path;
  EXPECT_THAT(Engine::Create(model, missing).status(), ::testing::Property(&absl::Status::code,
                                                                           absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(Engine::Create(model, missing).status().message()), HasSubstr("larger than"));

  // A dense model has no expert layers: no counts, and a file naming layers is refused.
  testing::TinyModelOptions dense;
  dense.n_vocab = 64;
  const std::string dense_model = WriteEngineModel(dense, "usage_dense.gguf");
  auto engine = Engine::Create(dense_model, CpuOnly());
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_TRUE((*engine)->expert_usage().layers.empty());
  WriteText(path, R"({"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [1]}]})");
  EngineOptions options = CpuOnly();
  options.expert_usage_path = path;
  EXPECT_THAT(std::string(Engine::Create(dense_model, options).status().message()),
              HasSubstr("layer 0 has no mixture of experts"));
}

}  // namespace
}  // namespace hetero
