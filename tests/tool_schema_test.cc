// Tool registration and the JSON-schema subset: what compiles, what is refused (with the
// keyword and its path), and validation of arguments with paths in the messages.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/tools.h"
#include "src/runtime/tools/json_schema.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kConvertSchema[] = R"({
  "type": "object",
  "properties": {
    "value": {"type": "number", "minimum": -1000, "maximum": 1000},
    "from": {"type": "string", "enum": ["km", "mi", "m"]},
    "to": {"enum": ["km", "mi", "m"], "description": "target unit"},
    "digits": {"type": "integer", "minimum": 0, "maximum": 12},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    "options": {"type": "object", "properties": {"exact": {"type": "boolean"}}, "required": ["exact"]}
  },
  "required": ["value", "from", "to"]
})";

Tool MakeTool(std::string name, std::string schema) {
  Tool t;
  t.name = std::move(name);
  t.description = "test";
  t.parameters_json = std::move(schema);
  t.handler = [](const std::string& args) -> absl::StatusOr<std::string> { return args; };
  return t;
}

TEST(ToolSchemaTest, RegistersAndValidates) {
  ToolRegistry tools;
  ASSERT_TRUE(tools.Register(MakeTool("convert", kConvertSchema)).ok());
  EXPECT_TRUE(tools.ValidateArguments("convert", R"({"value": 5, "from": "km", "to": "mi"})").ok());
  EXPECT_TRUE(tools.ValidateArguments("convert", R"({"value": 5.5, "from": "km", "to": "m", "digits": 3,
      "tags": ["a", "b"], "options": {"exact": true}})").ok());
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": 5, "from": "parsec", "to": "mi"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arguments.from: \"parsec\" is not one of")));
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": "5", "from": "km", "to": "mi"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arguments.value: expected number")));
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": 5000, "from": "km", "to": "mi"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("above the maximum")));
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": 5, "from": "km"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing required property 'to'")));
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": 5, "from": "km", "to": "mi", "x": 1})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected property 'x'")));
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": 5, "from": "km", "to": "mi", "digits": 2.5})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arguments.digits: expected integer")));
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": 5, "from": "km", "to": "mi", "tags": ["a", "b", "c", "d"]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arguments.tags: more than 3 items")));
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": 5, "from": "km", "to": "mi", "tags": ["abcdefghi"]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arguments.tags[0]: longer than 8")));
  EXPECT_THAT(tools.ValidateArguments("convert", R"({"value": 5, "from": "km", "to": "mi", "options": {}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arguments.options: missing required property 'exact'")));
  EXPECT_THAT(tools.ValidateArguments("convert", "{\"value\": "), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
  EXPECT_THAT(tools.ValidateArguments("nope", "{}"), StatusIs(absl::StatusCode::kNotFound));
  // Declaration order is kept (constrained decoding writes properties in this order).
  const auto& props = tools.schema(0).root().properties;
  ASSERT_EQ(props.size(), 6u);
  EXPECT_EQ(props[0].key, "value");
  EXPECT_EQ(props[1].key, "from");
  EXPECT_EQ(props[5].key, "options");
  EXPECT_TRUE(props[0].required);
  EXPECT_FALSE(props[3].required);
}

TEST(ToolSchemaTest, StringLengthsCountCodePoints) {
  ToolRegistry tools;
  ASSERT_TRUE(tools.Register(MakeTool("t", R"({"type": "object", "properties": {"s": {"type": "string", "maxLength": 2}}})")).ok());
  EXPECT_TRUE(tools.ValidateArguments("t", R"({"s": "éü"})").ok());
  EXPECT_FALSE(tools.ValidateArguments("t", R"({"s": "éüa"})").ok());
}

TEST(ToolSchemaTest, RefusesWhatItDoesNotSupport) {
  struct Case {
    const char* schema;
    const char* message;
  };
  const Case cases[] = {
      {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}})", "parameters.a: the schema keyword 'pattern' is not supported"},
      {R"({"type": "object", "properties": {"a": {"anyOf": []}}})", "'anyOf' is not supported"},
      {R"({"type": "object", "additionalProperties": true})", "'additionalProperties' is supported only as false"},
      {R"({"type": "object", "properties": {"a": {"type": ["string", "null"]}}})", "type lists are not supported"},
      {R"({"type": "object", "properties": {"a": {}}})", "parameters.a: 'type' is required"},
      {R"({"type": "object", "properties": {"a": {"type": "array"}}})", "an array schema needs 'items'"},
      {R"({"type": "object", "required": ["b"], "properties": {"a": {"type": "string"}}})", "'required' names 'b'"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "minimum": 3}}})", "'minimum' applies to number"},
      {R"({"type": "object", "properties": {"a": {"type": "number", "minimum": 5, "maximum": 1}}})", "maximum < minimum"},
      {R"({"type": "object", "properties": {"a": {"enum": ["x", 1]}}})", "'enum' mixes types"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "x"]}}})", "'enum' repeats"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "enum": [1]}}})", "is not of type string"},
      {R"({"type": "string"})", "the root must be an object schema (type object)"},
      {R"({"type": "objekt"})", "unknown type 'objekt'"},
      {R"({"type": "object", "properties": )", "not valid JSON"},
      {R"([1, 2])", "a schema must be a JSON object"},
      {R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}, "minItems": -1}}})", "'minItems' must be"},
  };
  for (const Case& c : cases) {
    ToolRegistry tools;
    EXPECT_THAT(tools.Register(MakeTool("t", c.schema)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.schema;
  }
  // Nesting past the limit.
  std::string deep = R"({"type": "string"})";
  for (int i = 0; i < 10; ++i) deep = std::string(R"({"type": "object", "properties": {"x": )") + deep + "}}";
  ToolRegistry tools;
  EXPECT_THAT(tools.Register(MakeTool("t", deep)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nesting deeper than")));
}

TEST(ToolSchemaTest, RefusesBadTools) {
  ToolRegistry tools;
  EXPECT_THAT(tools.Register(MakeTool("", kConvertSchema)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tool name")));
  EXPECT_THAT(tools.Register(MakeTool("has space", kConvertSchema)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(tools.Register(MakeTool(std::string(65, 'a'), kConvertSchema)), StatusIs(absl::StatusCode::kInvalidArgument));
  Tool no_handler = MakeTool("x", kConvertSchema);
  no_handler.handler = nullptr;
  EXPECT_THAT(tools.Register(no_handler), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no handler")));
  Tool bad_timeout = MakeTool("x", kConvertSchema);
  bad_timeout.timeout = std::chrono::milliseconds(0);
  EXPECT_THAT(tools.Register(bad_timeout), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("timeout")));
  ASSERT_TRUE(tools.Register(MakeTool("x", kConvertSchema)).ok());
  EXPECT_THAT(tools.Register(MakeTool("x", kConvertSchema)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already registered")));
  EXPECT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools.Definitions()[0].name, "x");
}

}  // namespace
}  // namespace hetero
