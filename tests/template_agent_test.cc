// Models whose templates define their own tool-call syntax, end to end: a tiny model (random
// weights) with the default model's tokenizer and a template carrying the family's features
// runs the agent loop through the engine and through the hetero-agent binary, with its first
// reply held to a tool call: the call is parsed, validated and run, and the template is
// recognised. Qwen3 (q/k norms; Hermes tools, <think> reasoning, enable_thinking) and
// Granite 3.0 (its multipliers; "<|tool_call|>" and a JSON list of calls).
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/chat.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "src/runtime/gguf.h"
#include "tests/support/default_model.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

using ::testing::HasSubstr;

// Qwen3's template is recognised by these features (the template itself is not committed).
constexpr char kQwen3StyleTemplate[] =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{{- \"# Tools\\n\\nYou may call one or more functions to assist with "
    "the user query.\\n\\n<tools>\" }}{%- endif %}{%- set ns = namespace(last_query_index=messages|length - 1) %}"
    "{%- if message.reasoning_content is defined %}{{- '<think>\\n' }}{%- endif %}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}";

// Granite 3.0's template (as published for granite-3.0-8b-instruct), its tool section and turns.
constexpr char kGraniteTemplate[] =
    "{%- if tools %}\n    {{- '<|start_of_role|>available_tools<|end_of_role|>\n' }}\n"
    "{%- for message in messages %}\n    {%- if message['role'] == 'assistant_tool_call' %}\n"
    "    {{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + message['content'] + '<|end_of_text|>\n' }}\n"
    "    {%- elif message['role'] == 'tool_response' %}\n"
    "    {{- '<|start_of_role|>tool_response<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}\n"
    "    {%- endif %}\n{%- endfor %}";

// The default model's vocabulary, merges and special token ids, copied into `b`.
void CopyTokenizer(const GgufFile& from, testing::GgufBuilder& b) {
  for (const GgufKeyValue& kv : from.metadata()) {
    const std::string key(kv.key);
    if (key.rfind("tokenizer.ggml.", 0) != 0) continue;
    const GgufValue& v = kv.value;
    switch (v.type()) {
      case GgufValueType::kString: b.AddString(key, std::string(*v.ToString())); break;
      case GgufValueType::kBool: b.AddBool(key, *v.ToBool()); break;
      case GgufValueType::kUint32: b.AddUint32(key, static_cast<uint32_t>(*v.ToUint64())); break;
      case GgufValueType::kArray: {
        const GgufArray& a = **v.ToArray();
        if (a.element_type == GgufValueType::kString) {
          b.AddStringArray(key, std::vector<std::string>(a.strings.begin(), a.strings.end()));
        } else if (a.element_type == GgufValueType::kInt32) {
          std::vector<int32_t> values(a.size);
          for (uint64_t i = 0; i < a.size; ++i) values[i] = a.Get<int32_t>(i);
          b.AddInt32Array(key, values);
        } else {
          ADD_FAILURE() << "unexpected array type in " << key;
        }
        break;
      }
      default: ADD_FAILURE() << "unexpected value type in " << key;
    }
  }
}

struct Family {
  const char* architecture;
  const char* chat_template;
  const char* described;    // ChatTemplate::Describe()
  const char* tool_format;  // the format the template defines
};

std::string WriteTinyModel(const Family& family) {
  auto vocab = GgufFile::Open(kDefaultModelPath);
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  testing::TinyModelOptions o;
  o.architecture = family.architecture;
  o.n_vocab = 49152;  // the default model's vocabulary
  o.context_length = 4096;  // the example tools' descriptions are long
  o.head_dim = 32;
  o.weight_type = TensorType::kF16;
  o.seed = 5;
  testing::GgufBuilder b = testing::TinyModelBuilder(o);
  CopyTokenizer(**vocab, b);
  b.AddString("tokenizer.chat_template", family.chat_template);
  return testing::WriteTempFile(b.Build(), absl::StrCat("tiny-", family.architecture, "-agent.gguf"));
}

Tool AddTool() {
  Tool t;
  t.name = "add";
  t.description = "Adds two numbers.";
  t.parameters_json = R"({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                         "required": ["a", "b"]})";
  t.handler = [](const std::string& args) -> absl::StatusOr<std::string> { return std::string("{\"sum\": 0}"); };
  return t;
}

class TemplateAgentTest : public ::testing::TestWithParam<Family> {};

TEST_P(TemplateAgentTest, ToolCallThroughTheEngine) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  const Family& family = GetParam();
  const std::string path = WriteTinyModel(family);
  EngineOptions options;
  options.threads = 1;
  auto engine = Engine::Create(path, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->chat_template().Describe(), family.described);
  EXPECT_TRUE((*engine)->chat_template().supports_tools());
  auto registry = std::make_shared<ToolRegistry>();
  ASSERT_TRUE(registry->Register(AddTool()).ok());
  auto session = (*engine)->NewSession();
  ASSERT_TRUE(session.ok());
  RunOptions run;
  run.max_tokens = 48;
  run.tool_registry = registry;
  run.tool_choice = RunOptions::ToolChoice::kRequired;
  run.max_tool_rounds = 1;
  run.enable_thinking = false;
  auto result = (*session)->Run("What is 2 plus 3?", run);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->report.tool_format, family.tool_format);
  ASSERT_FALSE(result->report.tool_calls.empty());
  EXPECT_EQ(result->report.tool_calls[0].name, "add");
  EXPECT_EQ(result->report.tool_calls[0].outcome, "ok") << result->report.tool_calls[0].detail;
}

TEST_P(TemplateAgentTest, HeteroAgentParsesTheCall) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  const Family& family = GetParam();
  const std::string path = WriteTinyModel(family);
  const std::string command = absl::StrCat(HETERO_AGENT_BINARY, " -m ", path,
                                           " -t 1 -n 48 --tool-choice required --no-think \"What is 2 plus 3?\" 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("tool call (round 0): "));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("format ", family.tool_format)));
  EXPECT_THAT(out, HasSubstr("answer: "));
}

INSTANTIATE_TEST_SUITE_P(
    Families, TemplateAgentTest,
    ::testing::Values(Family{"qwen3", kQwen3StyleTemplate, "chatml (hermes tools) (qwen3 reasoning)", "hermes"},
                      Family{"granite", kGraniteTemplate, "granite", "granite"}),
    [](const auto& info) { return std::string(info.param.architecture); });

}  // namespace
}  // namespace hetero
