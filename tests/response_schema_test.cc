// RunOptions::response_schema_json on the default model: whatever the sampling and however
// small the budget, the reply is one JSON value that parses and passes the schema, the
// streamed text is the reply, and bad schemas are refused before anything runs.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "nlohmann/json.hpp"
#include "src/runtime/tools/json_schema.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

constexpr const char* kCity =
    R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
        "country": {"type": "string", "maxLength": 30}}, "required": ["city", "country"]})";
constexpr const char* kScores =
    R"({"type": "object", "properties": {"scores": {"type": "array", "items": {"type": "integer", "minimum": 0,
        "maximum": 10}, "minItems": 2, "maxItems": 5}, "passed": {"type": "boolean"},
        "grade": {"enum": ["A", "B", "C"]}}, "required": ["scores", "passed", "grade"]})";
constexpr const char* kList = R"({"type": "object", "properties": {"colours": {"type": "array", "items": {"type": "string",
                                  "maxLength": 12}, "minItems": 1, "maxItems": 3}}, "required": ["colours"]})";

class ResponseSchemaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kDefaultModelPath)) return;
    EngineOptions o;
    o.threads = 2;
    engine_ = std::move(*Engine::Create(kDefaultModelPath, o));
  }
  static void TearDownTestSuite() { engine_.reset(); }
  void SetUp() override { HETERO_SKIP_WITHOUT_DEFAULT_MODEL(); }

  // Runs `question` held to `schema` and checks the reply against it.
  void ExpectValidReply(const char* schema, const std::string& question, RunOptions run) {
    run.response_schema_json = schema;
    std::string streamed;
    run.on_text = [&](std::string_view piece) {
      streamed += piece;
      return true;
    };
    auto session = engine_->NewSession();
    ASSERT_TRUE(session.ok());
    auto result = (*session)->Run(question, run);
    ASSERT_TRUE(result.ok()) << result.status();
    SCOPED_TRACE(result->text);
    const nlohmann::json reply = nlohmann::json::parse(result->text, nullptr, false);
    ASSERT_FALSE(reply.is_discarded()) << "not JSON";
    auto compiled = internal::CompiledSchema::Compile(schema, "test");
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_TRUE((*compiled)->Validate(reply, "reply").ok()) << (*compiled)->Validate(reply, "reply");
    EXPECT_EQ(streamed, result->text);
    EXPECT_LE(result->report.generated_tokens, run.max_tokens);
  }

  static std::unique_ptr<Engine> engine_;
};
std::unique_ptr<Engine> ResponseSchemaTest::engine_;

TEST_F(ResponseSchemaTest, GreedyRepliesPassTheSchema) {
  RunOptions run;
  run.max_tokens = 64;
  ExpectValidReply(kCity, "Where is the Eiffel Tower? Answer in JSON.", run);
  ExpectValidReply(kScores, "Grade a student with scores 7, 9 and 4.", run);
  ExpectValidReply(kList, "Name three colours.", run);
}

TEST_F(ResponseSchemaTest, SampledRepliesPassTheSchema) {
  RunOptions run;
  run.max_tokens = 64;
  run.sampling.temperature = 1.5f;  // far from the model's habits: the grammar must hold
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    run.sampling.seed = seed;
    ExpectValidReply(kScores, "Grade a student with scores 7, 9 and 4.", run);
  }
}

TEST_F(ResponseSchemaTest, SmallBudgetsStillCloseTheValue) {
  RunOptions run;
  run.sampling.temperature = 1.0f;
  run.sampling.seed = 7;
  for (int budget : {10, 14, 20}) {
    run.max_tokens = budget;
    ExpectValidReply(kCity, "Where is the Eiffel Tower?", run);
  }
}

TEST_F(ResponseSchemaTest, BadSchemasAreRefusedBeforeTheRun) {
  auto session = engine_->NewSession();
  ASSERT_TRUE(session.ok());
  RunOptions run;
  run.max_tokens = 8;
  run.response_schema_json = R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}})";
  EXPECT_THAT((*session)->Run("Hi", run), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'pattern'")));
  run.response_schema_json = "{not json";
  EXPECT_THAT((*session)->Run("Hi", run), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("response schema")));
  run.response_schema_json = R"({"type": "array", "items": {"type": "string"}})";
  EXPECT_THAT((*session)->Run("Hi", run),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("response schema: the root must be an object schema")));
  run.response_schema_json = kCity;
  auto tools = std::make_shared<ToolRegistry>();
  run.tool_registry = tools;
  EXPECT_THAT((*session)->Run("Hi", run), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("tool_registry")));
  EXPECT_TRUE((*session)->messages().empty()) << "nothing ran";
  // The session goes on, in free text and in JSON.
  RunOptions plain;
  plain.max_tokens = 8;
  EXPECT_TRUE((*session)->Run("Hi", plain).ok());
  run.tool_registry.reset();
  run.max_tokens = 48;
  auto structured = (*session)->Run("Where is the Colosseum?", run);
  ASSERT_TRUE(structured.ok()) << structured.status();
  EXPECT_FALSE(nlohmann::json::parse(structured->text, nullptr, false).is_discarded()) << structured->text;
}

}  // namespace
}  // namespace hetero
