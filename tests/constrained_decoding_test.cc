// Constrained decoding with the default model's tokenizer: random logits (biased toward
// tokens that close strings and objects, so that runs end), sampled the way the device
// worker samples (draw, and only when the draw breaks the grammar, mask and draw again).
// Every run must end in a reply that parses and whose calls validate: 200 runs over 5
// schemas, fixed seeds.
#include <optional>
#include <random>

#include "absl/strings/ascii.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "hetero/tools.h"
#include "src/runtime/sampler.h"
#include "src/runtime/tools/tool_call_constraint.h"
#include "tests/support/default_model.h"

namespace hetero::internal {
namespace {

const char* const kSchemas[] = {
    R"({"type": "object", "properties": {"expression": {"type": "string", "maxLength": 40}}, "required": ["expression"]})",
    R"({"type": "object", "properties": {"value": {"type": "number", "minimum": -100, "maximum": 1000},
        "from": {"type": "string", "enum": ["km", "mi", "m", "ft"]}, "to": {"type": "string", "enum": ["km", "mi", "m", "ft"]}},
        "required": ["value", "from", "to"]})",
    R"({"type": "object", "properties": {"utc_offset": {"type": "string", "maxLength": 6}}})",
    R"({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
        "minItems": 1, "maxItems": 4}, "exact": {"type": "boolean"}}, "required": ["items"]})",
    R"({"type": "object", "properties": {"query": {"type": "object", "properties": {"key": {"type": "string", "minLength": 1, "maxLength": 20},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10}}, "required": ["key"]}, "note": {"type": "null"}}, "required": ["query"]})",
};

class ConstrainedDecodingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kDefaultModelPath)) return;
    model_ = std::move(*Model::Load(kDefaultModelPath));
    tokenizer_ = std::move(*Tokenizer::Create(*model_));
    vocab_ = std::make_shared<VocabBytes>(*tokenizer_);
  }
  static void TearDownTestSuite() {
    vocab_.reset();
    tokenizer_.reset();
    model_.reset();
  }
  void SetUp() override { HETERO_SKIP_WITHOUT_DEFAULT_MODEL(); }

  static std::unique_ptr<Model> model_;
  static std::unique_ptr<Tokenizer> tokenizer_;
  static std::shared_ptr<VocabBytes> vocab_;
};
std::unique_ptr<Model> ConstrainedDecodingTest::model_;
std::unique_ptr<Tokenizer> ConstrainedDecodingTest::tokenizer_;
std::shared_ptr<VocabBytes> ConstrainedDecodingTest::vocab_;

Tool MakeTool(std::string name, const char* schema) {
  Tool t;
  t.name = std::move(name);
  t.description = "test";
  t.parameters_json = schema;
  t.handler = [](const std::string& a) -> absl::StatusOr<std::string> { return a; };
  return t;
}

// Random logits (a fixed pool of normal noise at random offsets, plus a bias per token:
// generating 49k normals per step would dominate the test's time), sampled the way the
// device worker samples: draw; only when the draw breaks the grammar, mask and draw again.
class NoisySampler {
 public:
  NoisySampler(const std::vector<float>& pool, const std::vector<float>& bias, uint32_t seed, uint64_t sampler_seed)
      : pool_(pool), bias_(bias), rng_(seed), logits_(bias.size()) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.seed = sampler_seed;
    sampler_.emplace(*Sampler::Create(params));
  }
  // The next token, accepted by `c`; nullopt at a dead end (nothing allowed).
  std::optional<int32_t> Next(ToolCallConstraint& c) {
    const size_t vocab = bias_.size();
    const float* n = pool_.data() + rng_() % (pool_.size() - vocab);
    for (size_t id = 0; id < vocab; ++id) logits_[id] = n[id] + bias_[id];
    saved_ = logits_;
    int32_t token = sampler_->Sample(absl::MakeSpan(logits_), history_);
    if (!c.Allows(token)) {
      logits_ = saved_;
      if (!c.Mask(absl::MakeSpan(logits_))) return std::nullopt;
      token = sampler_->Sample(absl::MakeSpan(logits_), history_);
      if (!c.Allows(token)) return std::nullopt;
    }
    c.Accept(token);
    history_.push_back(token);
    return token;
  }
  size_t steps() const { return history_.size(); }

 private:
  const std::vector<float>& pool_;
  const std::vector<float>& bias_;
  std::mt19937 rng_;
  std::optional<Sampler> sampler_;
  std::vector<float> logits_, saved_;
  std::vector<int32_t> history_;
};

// Feeds `text`'s tokens through `c` while it allows them; false at the first it refuses.
bool FeedText(const Tokenizer& tokenizer, ToolCallConstraint& c, const std::string& text) {
  const absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, false, false);
  if (!ids.ok()) return false;
  for (int32_t id : *ids) {
    if (!c.Allows(id)) return false;
    c.Accept(id);
  }
  return true;
}

std::vector<float> NoisePool(uint32_t seed) {
  std::vector<float> pool(1 << 20);
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 2.0f);
  for (float& v : pool) v = noise(rng);
  return pool;
}

TEST_F(ConstrainedDecodingTest, RandomRunsAlwaysGiveValidCalls) {
  const int vocab = tokenizer_->vocab_size();
  std::vector<float> bias(vocab, 0.0f);
  for (int id = 0; id < vocab; ++id) {
    const std::string& b = vocab_->bytes[id];
    if (b.find_first_of("\"}],") != std::string::npos) bias[id] = 2.5f;
    if (!b.empty() && b[0] == '"') bias[id] = 4.0f;  // ends a string
  }
  const std::vector<float> noise_pool = NoisePool(5);
  int runs = 0, with_calls = 0, masks = 0;
  for (int s = 0; s < 5; ++s) {
    ToolRegistry tools;
    ASSERT_TRUE(tools.Register(MakeTool("tool_" + std::to_string(s), kSchemas[s])).ok());
    ASSERT_TRUE(tools.Register(MakeTool("other", kSchemas[(s + 1) % 5])).ok());
    std::shared_ptr<const Grammar> grammar =
        Grammar::GenericReply({tools.tool(0).name, tools.tool(1).name}, {&tools.schema(0).root(), &tools.schema(1).root()});
    for (int run = 0; run < 40; ++run, ++runs) {
      NoisySampler sampler(noise_pool, bias, 1000 * s + run, 7 * run + s);
      ToolCallConstraint constraint(vocab_, grammar, ToolCallFormat::kGeneric);
      std::string text;
      bool ended = false;
      for (int step = 0; step < 1500 && !ended; ++step) {
        const std::optional<int32_t> token = sampler.Next(constraint);
        ASSERT_TRUE(token.has_value()) << "dead end after: " << text;
        if (tokenizer_->IsEndOfGeneration(*token)) {
          ended = true;
        } else {
          text += vocab_->bytes[*token];
        }
      }
      ASSERT_TRUE(ended) << "run " << runs << " did not finish: " << text;
      masks += constraint.masks_computed();
      const ParsedReply reply = ParseToolCalls(text, ToolCallFormat::kGeneric);
      const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << text;
      if (reply.is_tool_call()) ++with_calls;
      for (const ParsedToolCall& call : reply.calls) {
        ASSERT_EQ(call.error, "") << text;
        EXPECT_TRUE(tools.ValidateArguments(call.name, call.arguments_json).ok())
            << tools.ValidateArguments(call.name, call.arguments_json) << "\n" << text;
      }
    }
  }
  EXPECT_EQ(runs, 200);
  EXPECT_GT(with_calls, 20) << "the runs should exercise calls, not only answers";
  EXPECT_GT(masks, 0);
}

// Hermes: free text until <tool_call>, then a valid call, then </tool_call>, then free text.
TEST_F(ConstrainedDecodingTest, HermesConstrainsOnlyInsideTheTags) {
  ToolRegistry tools;
  ASSERT_TRUE(tools.Register(MakeTool("convert", kSchemas[1])).ok());
  std::shared_ptr<const Grammar> grammar = Grammar::ToolCall({"convert"}, {&tools.schema(0).root()});
  ToolCallConstraint c(vocab_, grammar, ToolCallFormat::kHermes);
  const auto feed_text = [&](const std::string& s) { return FeedText(*tokenizer_, c, s); };
  EXPECT_TRUE(feed_text("Sure, converting now. "));
  EXPECT_TRUE(feed_text("<tool_call>\n"));
  EXPECT_FALSE(c.Allows(tokenizer_->FindToken("Hello")));  // inside the call: JSON only
  EXPECT_TRUE(c.Allows(tokenizer_->eos()) == false);
  EXPECT_TRUE(feed_text(R"({"name": "convert", "arguments": {"value": 5, "from": "km", "to": "mi"}})"));
  EXPECT_TRUE(feed_text("\n</tool_call>"));
  EXPECT_TRUE(feed_text(" Done."));
  EXPECT_FALSE(c.broken());
  // A wrong tool name is refused.
  ToolCallConstraint d(vocab_, grammar, ToolCallFormat::kHermes);
  const absl::StatusOr<std::vector<int32_t>> opening = tokenizer_->Encode("<tool_call>{\"name\": \"", false, false);
  ASSERT_TRUE(opening.ok());
  for (int32_t id : *opening) d.Accept(id);
  std::vector<float> logits(tokenizer_->vocab_size(), 0.0f);
  ASSERT_TRUE(d.Mask(absl::MakeSpan(logits)));
  for (int id = 0; id < tokenizer_->vocab_size(); ++id) {
    if (logits[id] == 0.0f) {
      EXPECT_EQ(std::string("convert\"").rfind(vocab_->bytes[id], 0), 0u) << vocab_->bytes[id];
    }
  }
}

// Granite: free text until <|tool_call|>, then a list of valid calls, then only the end.
TEST_F(ConstrainedDecodingTest, GraniteConstrainsAfterTheMarker) {
  ToolRegistry tools;
  ASSERT_TRUE(tools.Register(MakeTool("convert", kSchemas[1])).ok());
  std::shared_ptr<const Grammar> grammar =
      ToolCallGrammar(ToolCallFormat::kGranite, {"convert"}, {&tools.schema(0).root()}, 2, false);
  const auto feed_text = [&](ToolCallConstraint& c, const std::string& s) { return FeedText(*tokenizer_, c, s); };
  ToolCallConstraint c(vocab_, grammar, ToolCallFormat::kGranite);
  EXPECT_TRUE(feed_text(c, "Sure, <b>converting</b> now. "));
  EXPECT_TRUE(c.Allows(tokenizer_->eos()));  // an answer without calls may end
  EXPECT_TRUE(feed_text(c, "<|tool_call|>"));
  EXPECT_FALSE(c.Allows(tokenizer_->FindToken("Hello")));  // after the marker: JSON only
  EXPECT_FALSE(c.Allows(tokenizer_->eos()));
  EXPECT_FALSE(c.Allows(tokenizer_->FindToken("{")));  // a list, not an object
  EXPECT_TRUE(feed_text(c, R"([{"name": "convert", "arguments": {"value": 5, "from": "km", "to": "mi"}}, )"));
  EXPECT_FALSE(feed_text(c, R"({"name": "other")"));  // an unknown tool
  ToolCallConstraint d(vocab_, grammar, ToolCallFormat::kGranite);
  EXPECT_TRUE(feed_text(d, R"(<|tool_call|>[{"name": "convert", "arguments": {"value": 1, "from": "m", "to": "ft"}}])"));
  EXPECT_FALSE(d.Allows(tokenizer_->FindToken(" Done")));  // the calls end the reply
  EXPECT_TRUE(d.Allows(tokenizer_->eos()));
  EXPECT_FALSE(d.broken());
  // At most max_calls (2) calls.
  ToolCallConstraint e(vocab_, grammar, ToolCallFormat::kGranite);
  const std::string one = R"({"name": "convert", "arguments": {"value": 1, "from": "m", "to": "ft"}})";
  EXPECT_TRUE(feed_text(e, "<|tool_call|>[" + one + ", " + one));
  EXPECT_FALSE(e.Allows(tokenizer_->FindToken(",")));
  EXPECT_TRUE(e.Allows(tokenizer_->FindToken("]")));
}

// tool_choice required in Hermes, Granite and Llama 3.1: the reply must open with the call
// (free text first is refused), and random sampling under the mask always yields a complete
// call, within a tight budget too.
TEST_F(ConstrainedDecodingTest, RequiredCallsOpenTheReply) {
  ToolRegistry tools;
  ASSERT_TRUE(tools.Register(MakeTool("convert", kSchemas[1])).ok());
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kGranite}) {
    std::shared_ptr<const Grammar> grammar =
        ToolCallGrammar(format, {"convert"}, {&tools.schema(0).root()}, /*max_calls=*/1, /*calls_only=*/true);
    ToolCallConstraint free_text(vocab_, grammar, format, /*call_required=*/true);
    EXPECT_FALSE(free_text.Allows(tokenizer_->FindToken("Sure"))) << ToolCallFormatName(format);
    EXPECT_FALSE(free_text.Allows(tokenizer_->eos())) << ToolCallFormatName(format);
    const std::vector<float> pool = NoisePool(7);
    std::vector<float> bias(tokenizer_->vocab_size(), 0.0f);
    for (int run = 0; run < 10; ++run) {
      // Half the runs within 48 tokens (the marker's bytes count in the budget).
      const int budget = run % 2 == 0 ? 400 : 48;
      ToolCallConstraint c(vocab_, grammar, format, /*call_required=*/true);
      NoisySampler sampler(pool, bias, 100 + run, 200 + run);
      std::string text;
      bool ended = false;
      for (int step = 0; step < budget && !ended; ++step) {
        c.SetBudget(budget - step);
        std::optional<int32_t> token = sampler.Next(c);
        ASSERT_TRUE(token.has_value()) << "dead end after " << text;
        ended = vocab_->end_of_generation[*token];
        if (!ended) text += vocab_->bytes[*token];
        // Stop once the call is closed: what follows is free text.
        if (format == ToolCallFormat::kHermes && text.find("</tool_call>") != std::string::npos) break;
      }
      const std::string trimmed(absl::StripLeadingAsciiWhitespace(text));
      const char* opening = format == ToolCallFormat::kHermes    ? "<tool_call>"
                            : format == ToolCallFormat::kGranite ? "<|tool_call|>"
                                                                 : "{";
      EXPECT_EQ(trimmed.rfind(opening, 0), 0u) << text;
      const ParsedReply parsed = ParseToolCalls(text, format);
      ASSERT_EQ(parsed.calls.size(), 1u) << text;
      EXPECT_EQ(parsed.calls[0].name, "convert") << text;
      EXPECT_TRUE(parsed.calls[0].error.empty()) << parsed.calls[0].error << " in " << text;
    }
  }
}

// The mask (built by a walk over the tokens in byte order, cached per state) must allow
// exactly the tokens that the per-token check allows, at every step of replayed replies.
TEST_F(ConstrainedDecodingTest, MaskEqualsThePerTokenCheck) {
  ToolRegistry tools;
  ASSERT_TRUE(tools.Register(MakeTool("calc", kSchemas[0])).ok());
  ASSERT_TRUE(tools.Register(MakeTool("convert", kSchemas[1])).ok());
  ASSERT_TRUE(tools.Register(MakeTool("pick", kSchemas[3])).ok());
  ASSERT_TRUE(tools.Register(MakeTool("find", kSchemas[4])).ok());
  const std::vector<std::string> names = {"calc", "convert", "pick", "find"};
  const std::vector<const SchemaNode*> schemas = {&tools.schema(0).root(), &tools.schema(1).root(),
                                                  &tools.schema(2).root(), &tools.schema(3).root()};
  struct Case {
    std::shared_ptr<const Grammar> grammar;
    ToolCallFormat format;
    std::string text;
  };
  const std::vector<Case> cases = {
      {Grammar::GenericReply(names, schemas), ToolCallFormat::kGeneric,
       R"({"tool_calls": [{"name": "calc", "arguments": {"expression": "(12.5 * 8) - 3 \u00e9 é"}}, )"
       R"({"name": "convert", "arguments": {"value": -42.195, "from": "km", "to": "mi"}}]})"},
      {Grammar::GenericReply(names, schemas), ToolCallFormat::kGeneric,
       R"({"tool_calls": [{"name": "pick", "arguments": {"items": [1, 22, 99], "exact": true}}, )"
       R"({"name": "find", "arguments": {"query": {"key": "capital of \"france\"", "limit": 3}, "note": null}}]})"},
      {Grammar::GenericReply(names, schemas), ToolCallFormat::kGeneric, R"({"response": "Paris, à bientôt."})"},
      {Grammar::ToolCall(names, schemas), ToolCallFormat::kHermes,
       "Let me check. <tool_call>\n"
       R"({"name": "convert", "arguments": {"value": 5, "from": "m", "to": "ft"}})"
       "\n</tool_call> done"},
  };
  int steps = 0;
  for (const Case& c : cases) {
    ToolCallConstraint constraint(vocab_, c.grammar, c.format);
    const absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(c.text, false, false);
    ASSERT_TRUE(ids.ok());
    for (size_t t = 0; t <= ids->size(); ++t) {
      std::vector<float> logits(tokenizer_->vocab_size(), 1.0f);
      const bool any = constraint.Mask(absl::MakeSpan(logits));
      bool any_allowed = false;
      for (int id = 0; id < tokenizer_->vocab_size(); ++id) {
        const bool allowed = constraint.Allows(id);
        any_allowed |= allowed;
        ASSERT_EQ(logits[id] == 1.0f, allowed)
            << "token " << id << " '" << vocab_->bytes[id] << "' after '" << c.text.substr(0, 60) << "' step " << t;
      }
      EXPECT_EQ(any, any_allowed);
      ++steps;
      if (t == ids->size()) break;
      ASSERT_TRUE(constraint.Allows((*ids)[t])) << "the replayed text left the grammar at token " << t;
      constraint.Accept((*ids)[t]);
    }
    EXPECT_FALSE(constraint.broken());
  }
  EXPECT_GT(steps, 80);
}

// With a token budget, every run must end complete: near the end a token is allowed only
// if the call can still be closed after it, and at the end only the closing bytes are. The
// logits favour tokens that open structure (",{", "\":"), which is what used to cut calls off.
TEST_F(ConstrainedDecodingTest, CallsAreCompleteWithinAnyBudget) {
  const int vocab = tokenizer_->vocab_size();
  std::vector<float> bias(vocab, 0.0f);
  for (int id = 0; id < vocab; ++id) {
    const std::string& b = vocab_->bytes[id];
    if (b.find_first_of("{[,:") != std::string::npos) bias[id] = 3.0f;
    if (b.find('"') != std::string::npos) bias[id] += 1.5f;
  }
  const std::vector<float> noise_pool = NoisePool(11);
  ToolRegistry tools;
  for (int s = 0; s < 5; ++s) ASSERT_TRUE(tools.Register(MakeTool("tool_" + std::to_string(s), kSchemas[s])).ok());
  std::vector<std::string> names;
  std::vector<const SchemaNode*> schemas;
  for (int s = 0; s < 5; ++s) {
    names.push_back(tools.tool(s).name);
    schemas.push_back(&tools.schema(s).root());
  }
  std::shared_ptr<const Grammar> grammar = Grammar::GenericReply(names, schemas);
  int calls = 0, closing_runs = 0;
  for (int run = 0; run < 60; ++run) {
    const int budget = 30 + run;  // 30 .. 89 tokens
    NoisySampler sampler(noise_pool, bias, 77 + run, 3 * run + 1);
    ToolCallConstraint constraint(vocab_, grammar, ToolCallFormat::kGeneric);
    std::string text;
    bool ended = false;
    bool closing = false;
    for (int step = 0; step < budget && !ended; ++step) {
      constraint.SetBudget(budget - step);
      closing |= constraint.closing();
      const std::optional<int32_t> token = sampler.Next(constraint);
      ASSERT_TRUE(token.has_value()) << "dead end after: " << text;
      if (tokenizer_->IsEndOfGeneration(*token)) {
        ended = true;
      } else {
        text += vocab_->bytes[*token];
      }
    }
    closing_runs += closing;
    const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << "budget " << budget << ", " << sampler.steps() << " tokens, ended " << ended << ": " << text;
    const ParsedReply reply = ParseToolCalls(text, ToolCallFormat::kGeneric);
    for (const ParsedToolCall& call : reply.calls) {
      ++calls;
      ASSERT_EQ(call.error, "") << text;
      EXPECT_TRUE(tools.ValidateArguments(call.name, call.arguments_json).ok()) << text;
    }
  }
  EXPECT_GT(calls, 15) << "the runs should write calls";
  EXPECT_GT(closing_runs, 20) << "the runs should reach the end of their budgets";
}

}  // namespace
}  // namespace hetero::internal
