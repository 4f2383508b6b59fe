// The byte-level JSON matcher behind constrained decoding: fixed documents it must accept
// or refuse, and random walks (each step picks one of the bytes it allows) that must
// always end in JSON that parses and validates against the schema, without dead ends.
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/runtime/tools/json_matcher.h"
#include "src/runtime/tools/json_schema.h"

namespace hetero::internal {
namespace {

constexpr char kSchema[] = R"({
  "type": "object",
  "properties": {
    "expression": {"type": "string", "minLength": 1, "maxLength": 12},
    "unit": {"type": "string", "enum": ["km", "mi", "m"]},
    "count": {"type": "integer", "minimum": -5, "maximum": 250},
    "ratio": {"type": "number", "minimum": 0.5, "maximum": 2},
    "exact": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 2},
    "nested": {"type": "object", "properties": {"z": {"type": "null"}}}
  },
  "required": ["expression", "count"]
})";

std::unique_ptr<CompiledSchema> Compile(const char* schema) {
  auto s = CompiledSchema::Compile(schema, "test");
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

bool Accepts(const Grammar& g, std::string_view text, bool require_done = true) {
  JsonMatcher m(g.root());
  if (!m.Feed(text)) return false;
  return !require_done || m.done();
}

TEST(JsonMatcherTest, FixedDocuments) {
  auto schema = Compile(kSchema);
  auto g = Grammar::ForSchema(schema->root());
  EXPECT_TRUE(Accepts(*g, R"({"expression": "1+2", "count": 3})"));
  EXPECT_TRUE(Accepts(*g, R"({"expression":"1+2","unit":"mi","count":-5,"ratio":1.25,"exact":false,"tags":["a","bc"],"nested":{"z":null}})"));
  EXPECT_TRUE(Accepts(*g, R"({"expression": "\u00e9\n\"", "count": 250})"));
  EXPECT_TRUE(Accepts(*g, "{\"expression\": \"\xc3\xa9\xe6\x97\xa5\", \"count\": 0}"));
  // Refused: missing required, wrong order, out of range, bad enum, extra space, exponent,
  // leading zero, lone surrogate escape, raw control char, invalid UTF-8, too long strings.
  EXPECT_FALSE(Accepts(*g, R"({"count": 3})"));
  EXPECT_FALSE(Accepts(*g, R"({"count": 3, "expression": "x"})"));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 251})"));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 300)", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": -6})"));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "unit": "ft", "count": 1})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression":  "x")", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 1e2})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 01})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 1.5})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 1, "ratio": 3})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "\ud800", "count": 1})", false));
  EXPECT_FALSE(Accepts(*g, "{\"expression\": \"a\x01\"", false));
  EXPECT_FALSE(Accepts(*g, "{\"expression\": \"\xc3\x28\"", false));
  EXPECT_FALSE(Accepts(*g, "{\"expression\": \"\xed\xa0\x80\"", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "1234567890123", "count": 1})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "", "count": 1})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 1, "tags": []})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 1, "tags": ["a", "b", "c"]})", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "x", "count": 1} )", false));  // nothing after the root
  // Prefixes of valid documents are accepted but not done.
  EXPECT_TRUE(Accepts(*g, R"({"expression": "1+2", "cou)", false));
  EXPECT_FALSE(Accepts(*g, R"({"expression": "1+2", "cou)", true));
}

TEST(JsonMatcherTest, ToolCallAndGenericReplyGrammars) {
  auto calc = Compile(R"({"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]})");
  auto clock = Compile(R"({"type": "object", "properties": {"utc_offset": {"type": "string"}}})");
  const std::vector<std::string> names = {"calculator", "current_time"};
  const std::vector<const SchemaNode*> schemas = {&calc->root(), &clock->root()};
  auto call = Grammar::ToolCall(names, schemas);
  EXPECT_TRUE(Accepts(*call, R"({"name": "calculator", "arguments": {"expression": "2*3"}})"));
  EXPECT_TRUE(Accepts(*call, R"({"name": "current_time", "arguments": {}})"));
  // The arguments follow the named tool's schema.
  EXPECT_FALSE(Accepts(*call, R"({"name": "current_time", "arguments": {"expression")", false));
  EXPECT_FALSE(Accepts(*call, R"({"name": "calculator", "arguments": {}})", false));
  EXPECT_FALSE(Accepts(*call, R"({"name": "calc", "arguments")", false));
  auto reply = Grammar::GenericReply(names, schemas);
  EXPECT_TRUE(Accepts(*reply, R"({"tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}, {"name": "current_time", "arguments": {}}]})"));
  EXPECT_TRUE(Accepts(*reply, R"({"response": "It is 4."})"));
  EXPECT_FALSE(Accepts(*reply, R"({"tool_calls": []})", false));
  EXPECT_FALSE(Accepts(*reply, R"({"answer": "x"})", false));
  auto llama = Grammar::ToolCall(names, schemas, "parameters");
  EXPECT_TRUE(Accepts(*llama, R"({"name": "current_time", "parameters": {"utc_offset": "+02:00"}})"));
}

// Random walks: at each step one allowed byte, favouring structure so that walks end.
TEST(JsonMatcherTest, RandomWalksAlwaysYieldValidJson) {
  auto schema = Compile(kSchema);
  auto g = Grammar::ForSchema(schema->root());
  std::mt19937 rng(11);
  const std::string favoured = "\"}],:0123456789-.tfn{[ ";
  for (int walk = 0; walk < 300; ++walk) {
    JsonMatcher m(g->root());
    std::string text;
    for (int step = 0; step < 4000 && !m.done(); ++step) {
      std::vector<uint8_t> allowed;
      for (int b = 0; b < 256; ++b) {
        JsonMatcher copy = m;
        if (copy.Feed(static_cast<uint8_t>(b))) allowed.push_back(static_cast<uint8_t>(b));
      }
      ASSERT_FALSE(allowed.empty()) << "dead end after: " << text;
      std::vector<uint8_t> preferred;
      for (uint8_t b : allowed) {
        if (favoured.find(static_cast<char>(b)) != std::string::npos) preferred.push_back(b);
      }
      const auto& pool = (!preferred.empty() && rng() % 4 != 0) ? preferred : allowed;
      const uint8_t b = pool[rng() % pool.size()];
      ASSERT_TRUE(m.Feed(b));
      text.push_back(static_cast<char>(b));
    }
    ASSERT_TRUE(m.done()) << text;
    const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    EXPECT_TRUE(schema->Validate(v).ok()) << schema->Validate(v) << "\n" << text;
  }
}

}  // namespace
}  // namespace hetero::internal
