// How a conversation is shown to the model for each run's form: with tools in the generic
// format (envelopes), with a template that writes calls itself, and without tools. A turn
// generated in the run's format is shown byte for byte; no run without tools sees an envelope.
#include "src/runtime/tools/tool_prompt.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace hetero::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A session that ran once with tools in the generic format: the user's question, the call
// turn, its result, the answer; then a plain question and its plain answer.
struct Conversation {
  std::vector<ChatMessage> messages;
  GeneratedTurns generated;
};

Conversation ToolsThenPlain() {
  Conversation c;
  c.messages.push_back({"user", "What is 2.5 plus 4?"});
  ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"call_0_0", "add", R"({"a":2.5,"b":4})"});
  c.messages.push_back(call);
  ChatMessage result{"tool", "6.5"};
  result.tool_call_id = "call_0_0";
  result.name = "add";
  c.messages.push_back(result);
  c.messages.push_back({"assistant", "It is 6.5."});
  c.messages.push_back({"user", "And the capital of France?"});
  c.messages.push_back({"assistant", "Paris"});
  // As the model wrote them (the grammar allows a space after ':' and ','): not what a JSON
  // writer would print, so a test can tell the two apart.
  c.generated[1] = {ToolCallFormat::kGeneric, R"({"tool_calls": [{"name": "add", "arguments": {"a": 2.5, "b": 4}}]})"};
  c.generated[3] = {ToolCallFormat::kGeneric, R"({"response": "It is 6.5."})"};
  return c;
}

TEST(ToolPromptTest, GenericRunShowsTurnsAsGeneratedAndOthersInTheirEnvelope) {
  const Conversation c = ToolsThenPlain();
  const std::vector<ChatMessage> shown =
      ConversationInToolFormat(c.messages, c.generated, ToolCallFormat::kGeneric, /*template_writes_calls=*/false);
  ASSERT_EQ(shown.size(), c.messages.size());
  EXPECT_EQ(shown[0].content, "What is 2.5 plus 4?");
  EXPECT_EQ(shown[1].content, c.generated.at(1).text) << "byte for byte, so its KV is reused";
  EXPECT_TRUE(shown[1].tool_calls.empty()) << "the envelope holds the calls";
  EXPECT_EQ(shown[2].content, "6.5");
  EXPECT_EQ(shown[3].content, c.generated.at(3).text);
  // The plain run's answer, never generated in the generic format, gets its envelope.
  const nlohmann::json answer = nlohmann::json::parse(shown[5].content);
  EXPECT_EQ(answer, nlohmann::json({{"response", "Paris"}}));
}

TEST(ToolPromptTest, GenericRunWritesEnvelopesForCallsItDidNotGenerate) {
  Conversation c = ToolsThenPlain();
  c.generated.clear();  // e.g. generated in another format
  c.messages[1].tool_calls.push_back({"call_0_1", "lookup", "not json"});
  c.messages.push_back({"assistant", "bad \xff byte"});  // generated text may end mid-UTF-8
  const std::vector<ChatMessage> shown =
      ConversationInToolFormat(c.messages, c.generated, ToolCallFormat::kGeneric, /*template_writes_calls=*/false);
  const nlohmann::json calls = nlohmann::json::parse(shown[1].content);
  EXPECT_EQ(calls, nlohmann::json::parse(R"({"tool_calls": [{"name": "add", "arguments": {"a": 2.5, "b": 4}},
                                                            {"name": "lookup", "arguments": {}}]})"));
  EXPECT_EQ(nlohmann::json::parse(shown[3].content), nlohmann::json({{"response", "It is 6.5."}}));
  EXPECT_TRUE(nlohmann::json::parse(shown.back().content).contains("response"));
}

TEST(ToolPromptTest, TemplateThatWritesCallsKeepsThemStructured) {
  Conversation c = ToolsThenPlain();
  c.generated[1] = {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2.5, \"b\": 4}}</tool_call>"};
  c.generated[3] = {ToolCallFormat::kHermes, "It is 6.5. "};
  const std::vector<ChatMessage> shown =
      ConversationInToolFormat(c.messages, c.generated, ToolCallFormat::kHermes, /*template_writes_calls=*/true);
  EXPECT_EQ(shown[1].content, "");
  ASSERT_EQ(shown[1].tool_calls.size(), 1u);
  EXPECT_EQ(shown[1].tool_calls[0].name, "add");
  EXPECT_EQ(shown[3].content, "It is 6.5. ") << "an answer generated in this format, as generated";
  EXPECT_EQ(shown[5].content, "Paris");
  // Without a template that writes calls, Hermes turns are shown as generated.
  const std::vector<ChatMessage> by_prompt =
      ConversationInToolFormat(c.messages, c.generated, ToolCallFormat::kHermes, /*template_writes_calls=*/false);
  EXPECT_EQ(by_prompt[1].content, c.generated.at(1).text);
  EXPECT_TRUE(by_prompt[1].tool_calls.empty());
}

TEST(ToolPromptTest, RunWithoutToolsSeesNoEnvelope) {
  const Conversation c = ToolsThenPlain();
  const ChatTemplate chat = ChatTemplate::ForFormat(ChatFormat::kChatML);
  ASSERT_FALSE(chat.supports_tools());
  const std::vector<ChatMessage> shown = ConversationWithoutTools(c.messages, chat);
  ASSERT_EQ(shown.size(), c.messages.size());
  for (const ChatMessage& m : shown) {
    EXPECT_THAT(m.content, Not(HasSubstr("\"response\""))) << m.role;
    EXPECT_THAT(m.content, Not(HasSubstr("\"tool_calls\""))) << m.role;
    EXPECT_NE(m.role, "tool") << "the template has no tool turns";
    EXPECT_TRUE(m.tool_calls.empty());
  }
  EXPECT_EQ(shown[1].content, R"(add({"a":2.5,"b":4}))");
  EXPECT_EQ(shown[2].role, "user");
  EXPECT_EQ(shown[2].content, "Tool results:\nadd: 6.5\n");
  EXPECT_EQ(shown[3].content, "It is 6.5.");
  absl::StatusOr<std::string> prompt = chat.Render(shown, {}, true);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_THAT(*prompt, Not(HasSubstr("\"response\"")));
  EXPECT_THAT(*prompt, Not(HasSubstr("\"tool_calls\"")));
}

TEST(ToolPromptTest, ConversationWithoutToolTurnsIsUnchanged) {
  const ChatTemplate chat = ChatTemplate::ForFormat(ChatFormat::kChatML);
  std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "{\"response\": \"x\"}"}};
  const std::vector<ChatMessage> shown = ConversationWithoutTools(messages, chat);
  ASSERT_EQ(shown.size(), 3u);
  for (size_t i = 0; i < shown.size(); ++i) {
    EXPECT_EQ(shown[i].role, messages[i].role);
    EXPECT_EQ(shown[i].content, messages[i].content) << "text is the caller's own, never rewritten";
  }
}

TEST(ToolPromptTest, ConsecutiveToolResultsBecomeOneTurn) {
  const ChatTemplate chat = ChatTemplate::ForFormat(ChatFormat::kChatML);
  std::vector<ChatMessage> messages = {{"user", "Weather and news?"}};
  ChatMessage calls{"assistant", "Looking."};
  calls.tool_calls = {{"c0", "weather", "{}"}, {"c1", "news", R"({"topic":"x"})"}};
  messages.push_back(calls);
  ChatMessage r0{"tool", "sunny"};
  r0.name = "weather";
  ChatMessage r1{"tool", "nothing"};  // a result without a name
  messages.push_back(r0);
  messages.push_back(r1);
  const std::vector<ChatMessage> shown = ConversationWithoutTools(messages, chat);
  ASSERT_EQ(shown.size(), 3u);
  EXPECT_EQ(shown[1].content, "Looking.\nweather({})\nnews({\"topic\":\"x\"})");
  EXPECT_EQ(shown[2].content, "Tool results:\nweather: sunny\ntool: nothing\n");
}

}  // namespace
}  // namespace hetero::internal
