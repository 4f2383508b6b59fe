// The agent loop through the engine on the default model (generic format, constrained):
// whichever tools the model calls, a tool that throws, one that hangs past its timeout and
// one that returns 1 MB end as error or truncated results with the right report entries,
// the task still answers, the answer is what was streamed, and the session goes on.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "tests/support/default_model.h"

namespace hetero {
namespace {

using ::testing::AnyOf;
using ::testing::Eq;

constexpr char kSchema[] = R"({"type": "object", "properties": {"topic": {"type": "string", "maxLength": 20}},
                               "required": ["topic"]})";

Tool MakeTool(std::string name, std::string description, std::function<absl::StatusOr<std::string>(const std::string&)> f,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) {
  Tool t;
  t.name = std::move(name);
  t.description = std::move(description);
  t.parameters_json = kSchema;
  t.handler = std::move(f);
  t.timeout = timeout;
  return t;
}

TEST(AgentLoopTest, BadToolsDoNotBreakTheSession) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  EngineOptions o;
  o.threads = 1;
  o.kv_capacity_tokens = 8192;
  auto engine = Engine::Create(kDefaultModelPath, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto tools = std::make_shared<ToolRegistry>();
  ASSERT_TRUE(tools->Register(MakeTool("search_web", "Searches the web for a topic.",
                                       [](const std::string&) -> absl::StatusOr<std::string> {
                                         return std::string(1 << 20, 'x');  // 1 MB
                                       })).ok());
  ASSERT_TRUE(tools->Register(MakeTool("get_weather", "Gets the weather for a city.",
                                       [](const std::string&) -> absl::StatusOr<std::string> {
                                         throw std::runtime_error("weather service exploded");
                                       })).ok());
  ASSERT_TRUE(tools->Register(MakeTool(
                  "get_news", "Gets the news about a topic.",
                  [](const std::string&) -> absl::StatusOr<std::string> {
                    std::this_thread::sleep_for(std::chrono::seconds(2));
                    return std::string("too late");
                  },
                  std::chrono::milliseconds(200)))
                  .ok());
  auto session = (*engine)->NewSession();
  ASSERT_TRUE(session.ok());
  RunOptions run;
  run.max_tokens = 96;
  run.tool_registry = tools;
  run.max_tool_rounds = 2;
  run.max_tool_result_bytes = 2000;
  std::string streamed;
  run.on_text = [&](std::string_view t) {
    streamed += t;
    return true;
  };
  auto result = (*session)->Run("Search the web for the weather and the news in Paris.", run);
  ASSERT_TRUE(result.ok()) << result.status();
  const TaskReport& r = result->report;
  EXPECT_EQ(r.tool_format, "generic");
  ASSERT_FALSE(r.tool_calls.empty()) << "the model answered without calling a tool: " << result->text;
  for (const ToolCallReport& c : r.tool_calls) {
    std::printf("round %d: %s(%s) -> %s\n", c.round, c.name.c_str(), c.arguments_json.c_str(), c.outcome.c_str());
    // Constrained: every call names a registered tool with valid arguments.
    if (c.name == "search_web") {
      EXPECT_EQ(c.outcome, "ok");
      EXPECT_TRUE(c.truncated);
      EXPECT_EQ(c.result_bytes, size_t{1} << 20);
    } else if (c.name == "get_weather") {
      EXPECT_EQ(c.outcome, "handler_error");
      EXPECT_THAT(c.detail, ::testing::HasSubstr("weather service exploded"));
    } else {
      EXPECT_EQ(c.name, "get_news");
      EXPECT_EQ(c.outcome, "timeout");
    }
  }
  EXPECT_THAT(r.stop_reason, AnyOf(Eq("end_of_generation"), Eq("max_tokens")));
  EXPECT_EQ(streamed, result->text) << "only the answer is streamed";
  // The stages: understand, generate, then per tool round tool_call, understand, generate.
  ASSERT_GE(r.stages.size(), 5u);
  EXPECT_EQ(r.stages[2].stage, Stage::kToolCall);
  // The session goes on, with the whole exchange in its history.
  const auto messages = (*session)->messages();
  EXPECT_GE(messages.size(), 4u);  // user, assistant (calls), tool result(s), assistant
  EXPECT_EQ(messages[2].role, "tool");
  RunOptions plain;
  plain.max_tokens = 8;
  EXPECT_TRUE((*session)->Run("Thanks.", plain).ok());
}

}  // namespace
}  // namespace hetero
