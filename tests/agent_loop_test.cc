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
#include "nlohmann/json.hpp"
#include "tests/support/default_model.h"

namespace hetero {
namespace {

using ::testing::AnyOf;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

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

absl::StatusOr<std::unique_ptr<Engine>> DefaultEngine(int threads) {
  EngineOptions o;
  o.threads = threads;
  o.kv_capacity_tokens = 8192;
  return Engine::Create(kDefaultModelPath, o);
}

TEST(AgentLoopTest, BadToolsDoNotBreakTheSession) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  auto engine = DefaultEngine(1);
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

std::shared_ptr<ToolRegistry> AddTool() {
  auto tools = std::make_shared<ToolRegistry>();
  Tool add;
  add.name = "add";
  add.description = "Adds two numbers.";
  add.parameters_json = R"({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                            "required": ["a", "b"]})";
  add.handler = [](const std::string& arguments) -> absl::StatusOr<std::string> {
    const nlohmann::json j = nlohmann::json::parse(arguments);  // validated against the schema
    return nlohmann::json(j.at("a").get<double>() + j.at("b").get<double>()).dump();
  };
  EXPECT_TRUE(tools->Register(add).ok());
  return tools;
}

void ExpectNoEnvelopeInHistory(const Session& session) {
  for (const ChatMessage& m : session.messages()) {
    EXPECT_THAT(m.content, Not(HasSubstr("\"response\""))) << m.role << ": " << m.content;
    EXPECT_THAT(m.content, Not(HasSubstr("\"tool_calls\""))) << m.role << ": " << m.content;
  }
}

// One session, runs with and without tools in each order. The conversation keeps answers and
// calls, never the generic format's reply envelope: a run without tools answers in plain text
// (it used to answer '{"response": "Paris"}' after a run with tools), and a run with tools
// after one with tools is shown the earlier turns as generated, so their KV is reused.
TEST(AgentLoopTest, RunsWithAndWithoutToolsInOneSession) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  auto engine = DefaultEngine(2);
  ASSERT_TRUE(engine.ok()) << engine.status();
  RunOptions with_tools;
  with_tools.max_tokens = 64;
  with_tools.tool_registry = AddTool();
  with_tools.max_tool_rounds = 2;
  RunOptions plain;
  plain.max_tokens = 16;

  auto session = (*engine)->NewSession();
  ASSERT_TRUE(session.ok());
  auto tools_first = (*session)->Run("What is 2.5 plus 4?", with_tools);
  ASSERT_TRUE(tools_first.ok()) << tools_first.status();
  EXPECT_EQ(tools_first->report.tool_format, "generic");
  EXPECT_THAT(tools_first->text, Not(StartsWith("{"))) << "the answer, out of its envelope";
  ExpectNoEnvelopeInHistory(**session);
  auto tools_again = (*session)->Run("And 3 plus 4?", with_tools);
  ASSERT_TRUE(tools_again.ok()) << tools_again.status();
  EXPECT_GE(tools_again->report.reused_prompt_tokens, tools_first->report.prompt_tokens)
      << "the earlier turns are shown as generated: all of the last prompt's KV is reused";
  auto plain_after = (*session)->Run("What is the capital of France? Answer in one word.", plain);
  ASSERT_TRUE(plain_after.ok()) << plain_after.status();
  EXPECT_THAT(plain_after->text, Not(HasSubstr("{\""))) << "no envelope without tools";
  auto empty_after = (*session)->Run("", plain);
  ASSERT_TRUE(empty_after.ok()) << empty_after.status();
  EXPECT_THAT(empty_after->text, Not(StartsWith("{\"")));
  ExpectNoEnvelopeInHistory(**session);

  // The other order: plain first, then tools (the plain answer is shown in its envelope).
  auto other = (*engine)->NewSession();
  ASSERT_TRUE(other.ok());
  auto plain_first = (*other)->Run("What is the capital of France? Answer in one word.", plain);
  ASSERT_TRUE(plain_first.ok()) << plain_first.status();
  auto tools_after = (*other)->Run("What is 2.5 plus 4?", with_tools);
  ASSERT_TRUE(tools_after.ok()) << tools_after.status();
  EXPECT_EQ(tools_after->report.tool_format, "generic");
  EXPECT_THAT(tools_after->text, Not(StartsWith("{")));
  ExpectNoEnvelopeInHistory(**other);
  const std::vector<ChatMessage> history = (*other)->messages();
  bool structured_call = false;
  for (const ChatMessage& m : history) structured_call |= !m.tool_calls.empty();
  if (!tools_after->report.tool_calls.empty()) {
    EXPECT_TRUE(structured_call) << "the call turn keeps its calls as ToolCall entries";
  }
}

// An API server's loop: the calls come back to the caller instead of running (required and
// named tool_choice hold the reply to them), the caller adds the results, and Continue
// answers from there; misuse is refused.
TEST(AgentLoopTest, ToolCallsReturnToTheCallerAndContinueAnswers) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  auto engine = DefaultEngine(1);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::atomic<int> ran{0};
  auto tools = std::make_shared<ToolRegistry>();
  for (const char* name : {"search", "weather"}) {
    ASSERT_TRUE(tools->Register(MakeTool(name, "Looks things up.", [&](const std::string&) -> absl::StatusOr<std::string> {
                  ++ran;
                  return std::string("{}");
                })).ok());
  }
  RunOptions o;
  o.max_tokens = 64;
  o.tool_registry = tools;
  o.return_tool_calls = true;
  o.tool_choice = RunOptions::ToolChoice::kNamed;
  o.tool_choice_name = "weather";
  o.max_parallel_calls = 1;
  auto session = (*engine)->NewSession();
  auto r = (*session)->Run("Tell me about rivers.", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->report.stop_reason, "tool_calls");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0].name, "weather");
  EXPECT_EQ(r->tool_calls[0].id, "call_0_0");
  EXPECT_TRUE(tools->ValidateArguments("weather", r->tool_calls[0].arguments_json).ok());
  EXPECT_EQ(ran.load(), 0) << "the caller runs the tools";
  std::vector<ChatMessage> history = (*session)->messages();
  ASSERT_FALSE(history.empty());
  EXPECT_EQ(history.back().tool_calls.size(), 1u) << "the turn joined the conversation with its call";

  // The caller's result, then the assistant goes on from it.
  history.push_back(ChatMessage{"tool", "{\"weather\": \"sunny\"}", {}, "call_0_0", "weather"});
  auto resumed = (*engine)->NewSessionWithHistory(history);
  ASSERT_TRUE(resumed.ok());
  RunOptions answer = o;
  answer.tool_choice = RunOptions::ToolChoice::kAuto;
  auto next = (*resumed)->Continue(answer);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GT(next->report.generated_tokens, 0);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ((*resumed)->Continue(answer).status().code(), absl::StatusCode::kFailedPrecondition)
      << "an assistant turn ends the conversation now";

  RunOptions bad = o;
  bad.tool_choice_name = "nope";
  EXPECT_EQ((*session)->Run("x", bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = o;
  bad.tool_registry = nullptr;
  EXPECT_EQ((*session)->Run("x", bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = o;
  bad.constrain_tool_calls = false;
  EXPECT_EQ((*session)->Run("x", bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hetero
