// hetero-serve's translation of OpenAI request bodies (server/openai_request.h): what each
// field becomes in hetero's options, and an error naming the field for everything else.
#include "server/openai_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace hetero::serve {
namespace {

using ::testing::HasSubstr;

TEST(OpenAiRequestTest, ChatFieldsBecomeRunOptions) {
  ChatRequest r;
  RequestError e;
  ASSERT_TRUE(ParseChatRequest(R"({"model": "m", "max_completion_tokens": 33, "temperature": 0.7, "top_p": 0.9,
      "seed": 5, "stop": ["\n\n", "User:"], "stream": true, "stream_options": {"include_usage": true},
      "frequency_penalty": 0.5, "presence_penalty": -0.25, "logprobs": true, "top_logprobs": 3, "user": "u1",
      "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
      "messages": [{"role": "developer", "content": "Be brief."},
                   {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                   {"role": "assistant", "content": null},
                   {"role": "user", "content": "Again?", "name": "ann"}]})",
                               512, r, e))
      << e.message;
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.run.max_tokens, 33);
  EXPECT_FLOAT_EQ(r.run.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.run.sampling.top_p, 0.9f);
  EXPECT_EQ(r.run.sampling.seed, 5u);
  EXPECT_FLOAT_EQ(r.run.sampling.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.run.sampling.presence_penalty, -0.25f);
  EXPECT_EQ(r.run.stop, (std::vector<std::string>{"\n\n", "User:"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.run.logprobs, 3);
  EXPECT_EQ(nlohmann::json::parse(r.run.response_schema_json), nlohmann::json::parse(R"({"type": "object"})"));
  ASSERT_EQ(r.history.size(), 3u);
  EXPECT_EQ(r.history[0].role, "system");
  EXPECT_EQ(r.history[1].content, "Hi there");
  EXPECT_EQ(r.history[2].content, "");
  EXPECT_EQ(r.user_message, "Again?");

  ChatRequest plain;
  ASSERT_TRUE(ParseChatRequest(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", 77, plain, e));
  EXPECT_EQ(plain.run.max_tokens, 77) << "the server's default";
  EXPECT_EQ(plain.run.logprobs, -1);
  EXPECT_TRUE(plain.run.response_schema_json.empty());
  ChatRequest object;
  ASSERT_TRUE(ParseChatRequest(R"({"model": "m", "response_format": {"type": "json_object"},
      "messages": [{"role": "user", "content": "x"}]})", 77, object, e));
  EXPECT_THAT(object.run.response_schema_json, HasSubstr("object"));
}

TEST(OpenAiRequestTest, EveryRefusalNamesItsField) {
  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  const std::string ok_messages = R"("messages": [{"role": "user", "content": "x"}])";
  const Case cases[] = {
      {"[1, 2]", "", "must be a JSON object"},
      {"{\"model\": 1}", "model", "must be a string"},
      {R"({"messages": [{"role": "user", "content": "x"}]})", "model", "is required"},
      {R"({"model": "m", "messages": []})", "messages", "non-empty array"},
      {R"({"model": "m", "messages": [{"content": "x"}]})", "messages[0].role", "role"},
      {R"({"model": "m", "messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role", "must be"},
      {R"({"model": "m", "messages": [{"role": "assistant", "content": "x"}]})", "messages[0].role", "last message"},
      {R"({"model": "m", "messages": [{"role": "user", "content": 5}]})", "messages[0].content", "string or an array"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0]",
       "only text"},
      {R"({"model": "m", "messages": [{"role": "tool", "content": "5"}, {"role": "user", "content": "x"}]})",
       "messages[0].tool_call_id", "needs its 'tool_call_id'"},
      {R"({"model": "m", "messages": [{"role": "tool", "content": "5", "tool_call_id": "c9"}]})",
       "messages[0].tool_call_id", "no earlier tool call"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages[0].tool_calls",
       "assistant message"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x", "colour": 1}]})", "messages[0].colour", "unknown"},
      {R"({"model": "m", "tools": [], "messages": [{"role": "user", "content": "x"}]})", "tools", "1 to 128"},
      {R"({"model": "m", "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "always",
          "messages": [{"role": "user", "content": "x"}]})", "tool_choice", "must be none"},
      {R"({"model": "m", "tool_choice": "required", "messages": [{"role": "user", "content": "x"}]})", "tool_choice",
       "needs 'tools'"},
      {R"({"model": "m", "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}, "messages": [{"role": "user", "content": "x"}]})",
       "tool_choice", "not one of"},
      {R"({"model": "m", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "patternProperties": {}}}}], "messages": [{"role": "user", "content": "x"}]})", "tools[0]", "patternProperties"},
      {R"({"model": "m", "tools": [{"type": "retrieval"}], "messages": [{"role": "user", "content": "x"}]})", "tools[0]",
       "must be"},
      {R"({"model": "m", "logit_bias": {}, "messages": [{"role": "user", "content": "x"}]})", "logit_bias", "not supported"},
      {R"({"model": "m", "bogus": 1, "messages": [{"role": "user", "content": "x"}]})", "bogus", "unknown field"},
      {R"({"model": "m", "temperature": 3, "messages": [{"role": "user", "content": "x"}]})", "temperature", "between 0 and 2"},
      {R"({"model": "m", "top_p": 0, "messages": [{"role": "user", "content": "x"}]})", "top_p", "between"},
      {R"({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})", "max_tokens", "between 1"},
      {R"({"model": "m", "max_tokens": 1.5, "messages": [{"role": "user", "content": "x"}]})", "max_tokens", "integer"},
      {R"({"model": "m", "n": 2, "messages": [{"role": "user", "content": "x"}]})", "n", "must be 1"},
      {R"({"model": "m", "stop": "", "messages": [{"role": "user", "content": "x"}]})", "stop", "empty"},
      {R"({"model": "m", "stop": ["a","b","c","d","e"], "messages": [{"role": "user", "content": "x"}]})", "stop", "up to 4"},
      {R"({"model": "m", "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "x"}]})",
       "stream_options", "only allowed with stream"},
      {R"({"model": "m", "top_logprobs": 2, "messages": [{"role": "user", "content": "x"}]})", "top_logprobs", "needs logprobs"},
      {R"({"model": "m", "logprobs": true, "top_logprobs": 21, "messages": [{"role": "user", "content": "x"}]})",
       "top_logprobs", "between 0 and 20"},
      {R"({"model": "m", "response_format": {"type": "xml"}, "messages": [{"role": "user", "content": "x"}]})",
       "response_format.type", "must be"},
      {R"({"model": "m", "response_format": {"type": "json_schema"}, "messages": [{"role": "user", "content": "x"}]})",
       "response_format.json_schema", "schema"},
  };
  for (const Case& c : cases) {
    ChatRequest r;
    RequestError e;
    EXPECT_FALSE(ParseChatRequest(c.body, 10, r, e)) << c.body;
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_THAT(e.message, HasSubstr(c.message)) << c.body;
    const nlohmann::json error = nlohmann::json::parse(ErrorJson(e));
    EXPECT_EQ(error["error"]["message"], e.message);
    EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  }
  ChatRequest r;
  RequestError e;
  EXPECT_FALSE(ParseChatRequest("{not json", 10, r, e));
  EXPECT_THAT(e.message, HasSubstr("not valid JSON"));
  EXPECT_FALSE(ParseChatRequest(std::string("{\"model\": \"\xff\"}"), 10, r, e)) << "invalid UTF-8 is not JSON";
}

TEST(OpenAiRequestTest, ToolsBecomeARegistryWhoseCallsReturnToTheClient) {
  ChatRequest r;
  RequestError e;
  ASSERT_TRUE(ParseChatRequest(R"({"model": "m", "parallel_tool_calls": false,
      "tools": [{"type": "function", "function": {"name": "add", "description": "Adds.",
                 "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                                "required": ["a", "b"]}}},
                {"type": "function", "function": {"name": "now"}}],
      "tool_choice": {"type": "function", "function": {"name": "add"}},
      "messages": [{"role": "user", "content": "2+3?"},
                   {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "5"}]})",
                               64, r, e))
      << e.message;
  ASSERT_NE(r.run.tool_registry, nullptr);
  EXPECT_EQ(r.run.tool_registry->size(), 2u);
  EXPECT_TRUE(r.run.return_tool_calls);
  EXPECT_EQ(r.run.tool_choice, RunOptions::ToolChoice::kNamed);
  EXPECT_EQ(r.run.tool_choice_name, "add");
  EXPECT_EQ(r.run.max_parallel_calls, 1);
  EXPECT_TRUE(r.resume) << "the last message is a tool result";
  ASSERT_EQ(r.history.size(), 3u);
  EXPECT_EQ(r.history[1].tool_calls.at(0).arguments_json, "{\"a\": 2, \"b\": 3}");
  EXPECT_EQ(r.history[2].name, "add") << "named after the call it answers";
  ChatRequest none;
  ASSERT_TRUE(ParseChatRequest(R"({"model": "m", "tool_choice": "none",
      "tools": [{"type": "function", "function": {"name": "now"}}], "messages": [{"role": "user", "content": "x"}]})",
                               64, none, e));
  EXPECT_EQ(none.run.tool_registry, nullptr) << "none: the model just answers";
}

TEST(OpenAiRequestTest, CompletionsAndEmbeddings) {
  CompletionRequest c;
  RequestError e;
  ASSERT_TRUE(ParseCompletionRequest(R"({"model": "m", "prompt": ["Once"], "max_tokens": 9, "echo": true,
      "stop": "\n", "temperature": 0})", 100, c, e)) << e.message;
  EXPECT_EQ(c.prompt, "Once");
  EXPECT_EQ(c.options.max_tokens, 9);
  EXPECT_TRUE(c.echo);
  EXPECT_EQ(c.options.stop, (std::vector<std::string>{"\n"}));
  EXPECT_FALSE(ParseCompletionRequest(R"({"model": "m", "prompt": ["a", "b"]})", 100, c, e));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_FALSE(ParseCompletionRequest(R"({"model": "m", "prompt": ""})", 100, c, e));
  EXPECT_FALSE(ParseCompletionRequest(R"({"model": "m", "prompt": "x", "suffix": "y"})", 100, c, e));
  EXPECT_EQ(e.param, "suffix");

  EmbeddingRequest em;
  ASSERT_TRUE(ParseEmbeddingRequest(R"({"model": "m", "input": ["a", "b"], "encoding_format": "base64"})", em, e));
  EXPECT_EQ(em.inputs.size(), 2u);
  EXPECT_TRUE(em.base64);
  for (const char* bad : {R"({"model": "m", "input": []})", R"({"model": "m", "input": [1]})",
                          R"({"model": "m", "input": [""]})", R"({"model": "m"})",
                          R"({"model": "m", "input": "x", "encoding_format": "int8"})",
                          R"({"model": "m", "input": "x", "dimensions": 8})"}) {
    EmbeddingRequest r;
    EXPECT_FALSE(ParseEmbeddingRequest(bad, r, e)) << bad;
    EXPECT_FALSE(e.param.empty()) << bad;
  }
}

}  // namespace
}  // namespace hetero::serve
