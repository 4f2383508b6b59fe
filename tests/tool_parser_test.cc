// ParseToolCalls on well-formed, several, truncated, nested and hostile replies in each
// format: the right calls, or calls carrying a clear error, never a crash.
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/tools.h"

namespace hetero {
namespace {

using ::testing::HasSubstr;

TEST(ToolParserTest, HermesOneAndSeveralCalls) {
  ParsedReply r = ParseToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2+2\"}}\n</tool_call>",
      ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "calculator");
  EXPECT_EQ(r.calls[0].arguments_json, R"({"expression":"2+2"})");
  EXPECT_EQ(r.calls[0].error, "");
  EXPECT_EQ(r.text, "Let me check.");

  r = ParseToolCalls("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>garbage<tool_call>{\"name\": \"b\", "
                     "\"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}</tool_call>",
                     ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_EQ(r.calls[1].arguments_json, R"({"x":[1,{"y":"}"}]})");
  EXPECT_EQ(r.text, "garbage");

  // A JSON list inside one tag (SmolLM2-1.7B's habit).
  r = ParseToolCalls("<tool_call>[{\"name\": \"a\", \"arguments\": {\"q\": 1}}, {\"name\": \"b\", \"arguments\": {}}]</tool_call>",
                     ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"q":1})");
  EXPECT_EQ(r.calls[1].name, "b");
}

TEST(ToolParserTest, EscapesUnicodeAndStringArguments) {
  ParsedReply r = ParseToolCalls(
      R"(<tool_call>{"name": "say", "arguments": {"text": "a \"quoted\" \\ brace } and \u00e9 é 日本"}}</tool_call>)",
      ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].error, "");
  EXPECT_THAT(r.calls[0].arguments_json, HasSubstr("\\\"quoted\\\""));
  EXPECT_THAT(r.calls[0].arguments_json, HasSubstr("é é 日本"));
  // Arguments written as a JSON string holding the object.
  r = ParseToolCalls(R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)", ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"a":1})");
}

TEST(ToolParserTest, BrokenCallsCarryErrors) {
  ParsedReply r = ParseToolCalls("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ", ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_THAT(r.calls[0].error, HasSubstr("unterminated <tool_call>"));
  EXPECT_THAT(r.calls[0].error, HasSubstr("invalid JSON"));

  r = ParseToolCalls("<tool_call>{\"arguments\": {}}</tool_call>", ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_THAT(r.calls[0].error, HasSubstr("no \"name\""));

  r = ParseToolCalls("<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", ToolCallFormat::kHermes);
  EXPECT_THAT(r.calls[0].error, HasSubstr("must be a JSON object"));

  r = ParseToolCalls("<tool_call>{\"name\": \"f\", \"arguments\": \"not json\"}</tool_call>", ToolCallFormat::kHermes);
  EXPECT_THAT(r.calls[0].error, HasSubstr("a string that is not JSON"));

  r = ParseToolCalls("<tool_call>[]</tool_call>", ToolCallFormat::kHermes);
  EXPECT_THAT(r.calls[0].error, HasSubstr("empty list"));

  r = ParseToolCalls("<tool_call>{\"name\": 7}</tool_call>", ToolCallFormat::kHermes);
  EXPECT_THAT(r.calls[0].error, HasSubstr("no \"name\" string"));
}

TEST(ToolParserTest, Llama3) {
  ParsedReply r = ParseToolCalls("<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}", ToolCallFormat::kLlama3);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_time");
  EXPECT_EQ(r.calls[0].arguments_json, R"({"tz":"UTC"})");
  r = ParseToolCalls("The answer is 4.", ToolCallFormat::kLlama3);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.text, "The answer is 4.");
  r = ParseToolCalls("{\"name\": \"f\", \"parameters\": {", ToolCallFormat::kLlama3);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_THAT(r.calls[0].error, HasSubstr("invalid JSON"));
}

TEST(ToolParserTest, Generic) {
  ParsedReply r = ParseToolCalls(R"({"tool_calls": [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]})",
                                 ToolCallFormat::kGeneric);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"x":1})");
  r = ParseToolCalls(R"({"response": "It is 4."})", ToolCallFormat::kGeneric);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.text, "It is 4.");
  r = ParseToolCalls("Plain words, no JSON.", ToolCallFormat::kGeneric);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.text, "Plain words, no JSON.");
  r = ParseToolCalls(R"({"tool_calls": [{"name": "a", "argu)", ToolCallFormat::kGeneric);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_THAT(r.calls[0].error, HasSubstr("invalid JSON"));
  r = ParseToolCalls(R"({"tool_calls": []})", ToolCallFormat::kGeneric);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_THAT(r.calls[0].error, HasSubstr("non-empty list"));
}

TEST(ToolParserTest, Granite) {
  ParsedReply r = ParseToolCalls(
      "Let me look.\n<|tool_call|>[{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}, "
      "{\"arguments\": {\"q\": \"x\"}, \"name\": \"search\"}]",
      ToolCallFormat::kGranite);
  EXPECT_EQ(r.text, "Let me look.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "weather");
  EXPECT_EQ(r.calls[0].arguments_json, R"({"city":"Paris"})");
  EXPECT_EQ(r.calls[1].name, "search");
  EXPECT_EQ(r.calls[1].arguments_json, R"({"q":"x"})");
  // A lone object is taken as one call; no marker is an answer, even if it looks like JSON.
  r = ParseToolCalls(R"(<|tool_call|>{"name": "a", "arguments": {}})", ToolCallFormat::kGranite);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "a");
  r = ParseToolCalls(R"(  [{"name": "a", "arguments": {}}] )", ToolCallFormat::kGranite);
  EXPECT_FALSE(r.is_tool_call());
  EXPECT_EQ(r.text, R"([{"name": "a", "arguments": {}}])");
  // Broken: cut off, empty list, wrong shape.
  r = ParseToolCalls(R"(<|tool_call|>[{"name": "a", "argum)", ToolCallFormat::kGranite);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_THAT(r.calls[0].error, HasSubstr("invalid JSON"));
  r = ParseToolCalls("<|tool_call|>[]", ToolCallFormat::kGranite);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_THAT(r.calls[0].error, HasSubstr("empty list"));
  r = ParseToolCalls(R"(<|tool_call|>[{"name": "a", "arguments": [1]}])", ToolCallFormat::kGranite);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_THAT(r.calls[0].error, HasSubstr("must be a JSON object"));
  EXPECT_EQ(ToolCallFormatName(ToolCallFormat::kGranite), "granite");
}

// Random and truncated input: never crashes; every call has a name or an error.
TEST(ToolParserTest, HostileInputNeverBreaksIt) {
  const std::string hermes = "<tool_call>{\"name\": \"calc\", \"arguments\": {\"e\": \"(1+2)*3\", \"n\": [1, 2.5, true, null]}}</tool_call>";
  const std::string granite = "ok <|tool_call|>[{\"name\": \"calc\", \"arguments\": {\"e\": \"(1+2)*3\"}}, {\"name\": \"x\"}]";
  std::mt19937 rng(7);
  const char alphabet[] = "{}[]\":,\\ <>/|tool_calnmeargus0123456789\xc3\xa9\xff\x00\n";
  for (int i = 0; i < 3000; ++i) {
    const std::string& good = i % 2 == 0 ? hermes : granite;
    std::string s;
    if (i % 3 == 0) {
      s = good.substr(0, rng() % (good.size() + 1));  // truncated
    } else if (i % 3 == 1) {
      s = good;
      for (int k = 0; k < 3; ++k) s[rng() % s.size()] = alphabet[rng() % (sizeof(alphabet) - 1)];
    } else {
      const int n = static_cast<int>(rng() % 80);
      for (int k = 0; k < n; ++k) s.push_back(alphabet[rng() % (sizeof(alphabet) - 1)]);
    }
    for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kGeneric,
                             ToolCallFormat::kGranite, ToolCallFormat::kAuto}) {
      const ParsedReply r = ParseToolCalls(s, f);
      for (const ParsedToolCall& c : r.calls) EXPECT_TRUE(!c.name.empty() || !c.error.empty()) << s;
    }
  }
}

}  // namespace
}  // namespace hetero
