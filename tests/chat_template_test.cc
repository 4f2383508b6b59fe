// Chat templates against jinja2 renderings of the real templates
// (tests/data/chat_template_vectors.json, made by scripts/gen_chat_template_vectors.py):
// the default model's own template, Qwen2.5 (ChatML + Hermes tools), Llama 3.1 (tools) and
// Gemma 2; plus detection, the families without vectors, Python-style JSON and errors.
#include <ctime>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/chat.h"
#include "hetero/model.h"
#include "nlohmann/json.hpp"
#include "src/runtime/chat/reasoning_stream.h"
#include "src/runtime/chat/python_json.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

struct Conversation {
  std::vector<ChatMessage> messages;
  std::vector<ToolDefinition> tools;
};

Conversation ToConversation(const Json& j) {
  Conversation c;
  for (const Json& m : j["messages"]) {
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    msg.content = m["content"].get<std::string>();
    if (m.contains("name")) msg.name = m["name"].get<std::string>();
    if (m.contains("reasoning_content")) msg.reasoning_content = m["reasoning_content"].get<std::string>();
    if (m.contains("tool_calls")) {
      for (const Json& call : m["tool_calls"]) {
        msg.tool_calls.push_back({call["id"].get<std::string>(), call["function"]["name"].get<std::string>(),
                                  call["function"]["arguments"].dump()});
      }
    }
    c.messages.push_back(std::move(msg));
  }
  if (j.contains("tools")) {
    for (const Json& t : j["tools"]) {
      c.tools.push_back({t["name"].get<std::string>(), t["description"].get<std::string>(), t["parameters"].dump()});
    }
  }
  return c;
}

Json LoadVectors() {
  std::ifstream in(std::string(HETERO_TEST_DATA_DIR) + "/chat_template_vectors.json");
  EXPECT_TRUE(in.good());
  return Json::parse(in);
}

std::optional<ChatTemplate> TemplateFor(const std::string& name) {
  if (name == "smollm2") {
    if (!std::filesystem::exists(kDefaultModelPath)) return std::nullopt;
    auto model = Model::Load(kDefaultModelPath);
    EXPECT_TRUE(model.ok()) << model.status();
    auto t = ChatTemplate::FromModel(**model);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::optional<ChatTemplate>(*t) : std::nullopt;
  }
  if (name == "qwen2.5") {
    // Detection reads the default system prompt and the tools section from the template;
    // these are the features that distinguish Qwen2.5's.
    auto t = ChatTemplate::FromJinja(
        "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
        "{{ '<tools>' }} You may call one or more functions to assist with the user query.");
    EXPECT_TRUE(t.ok());
    return *t;
  }
  if (name == "qwen3") {
    // Qwen3's distinguishing features: Hermes tools, no default system prompt, <think>
    // reasoning with reasoning_content, last_query_index and enable_thinking.
    auto t = ChatTemplate::FromJinja(
        "{{ '<|im_start|>' }}{{ '<tools>' }} You may call one or more functions to assist with the user query. "
        "{%- set ns = namespace(last_query_index=0) %} reasoning_content '<think>' enable_thinking");
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  if (name == "phi3.5") {
    // Phi-3.5's markers written literally, a system turn, no bos_token.
    auto t = ChatTemplate::FromJinja("{{'<|system|>\n' + c + '<|end|>\n'}}{{'<|user|>\n'}}{{ '<|assistant|>\n' }}");
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  if (name == "granite3.0") {
    // Granite 3.0's role markers and its two roles for calls and results.
    auto t = ChatTemplate::FromJinja(
        "{{- '<|start_of_role|>' }} message['role'] == 'assistant_tool_call' message['role'] == 'tool_response'");
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  if (name == "llama3.1") return ChatTemplate::ForFormat(ChatFormat::kLlama3);
  if (name == "gemma2") return ChatTemplate::ForFormat(ChatFormat::kGemma);
  return std::nullopt;
}

class ChatTemplateVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateVectorsTest, MatchesJinja) {
  static const Json* data = new Json(LoadVectors());
  const std::string name = GetParam();
  std::optional<ChatTemplate> chat = TemplateFor(name);
  if (name == "smollm2") {
    HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  }
  ASSERT_TRUE(chat.has_value());
  int checked = 0;
  for (const Json& v : (*data)["vectors"]) {
    if (v["template"] != name) continue;
    const int index = v["conversation"].get<int>();
    const Conversation c = ToConversation((*data)["conversations"][index]);
    const bool gen = v["add_generation_prompt"].get<bool>();
    ChatRenderOptions options;
    options.enable_thinking = v.value("enable_thinking", true);
    auto rendered = chat->Render(c.messages, c.tools, gen, options);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_EQ(*rendered, v["expected"].get<std::string>())
        << name << " conversation " << index << " add_generation_prompt=" << gen << "\n--- got:\n"
        << absl::CEscape(*rendered) << "\n--- want:\n" << absl::CEscape(v["expected"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, name == "smollm2" ? 40 : 20);
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateVectorsTest,
                         ::testing::Values("smollm2", "qwen2.5", "llama3.1", "gemma2", "qwen3", "phi3.5",
                                           "granite3.0"), [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '.') ch = '_';
                           return n;
                         });

TEST(ChatTemplateTest, DefaultModelIsChatMLWithDefaultSystemPrompt) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  auto model = Model::Load(kDefaultModelPath);
  ASSERT_TRUE(model.ok());
  auto chat = ChatTemplate::FromModel(**model);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->Describe(), "chatml");
  EXPECT_FALSE(chat->supports_tools());
  EXPECT_EQ(chat->default_system_prompt(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

TEST(ChatTemplateTest, SplitsReasoningFromTheAnswer) {
  SplitReply r = SplitReasoning("<think>\nStep one.\nStep two.\n</think>\n\nThe answer.");
  EXPECT_EQ(r.reasoning, "Step one.\nStep two.");
  EXPECT_EQ(r.answer, "The answer.");
  r = SplitReasoning("No reasoning here, <think> later is text.");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.answer, "No reasoning here, <think> later is text.");
  r = SplitReasoning("\n<think>cut off while thinking");  // max_tokens inside the block
  EXPECT_EQ(r.reasoning, "cut off while thinking");
  EXPECT_EQ(r.answer, "");
  r = SplitReasoning("<think>\n\n</think>\n\nDirect.");  // enable_thinking off
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.answer, "Direct.");
  EXPECT_EQ(SplitReasoning("").answer, "");
}

// Streamed apart piece by piece, at every split of each reply into two and into single
// bytes, the reasoning and the answer equal SplitReasoning of the whole reply.
TEST(ChatTemplateTest, ReasoningStreamsApartAsSplitReasoningSplits) {
  const std::vector<std::string> replies = {
      "<think>\nStep one.\n\nStep two.\n</think>\n\nThe answer.",
      "Plain answer with </think> inside.",
      "\n<think>unclosed reasoning\n\n",
      "<think>\n\n</think>\n\nDirect.",
      "<thinking> is not the marker",
      "<think>a</think>b</think>c",
      "<th",
  };
  for (const std::string& reply : replies) {
    const SplitReply want = SplitReasoning(reply);
    std::vector<std::vector<std::string>> splits;
    for (size_t cut = 0; cut <= reply.size(); ++cut) splits.push_back({reply.substr(0, cut), reply.substr(cut)});
    std::vector<std::string> bytes;
    for (char c : reply) bytes.push_back(std::string(1, c));
    splits.push_back(bytes);
    for (const std::vector<std::string>& pieces : splits) {
      std::string reasoning, answer;
      internal::ReasoningStream stream([&](std::string_view p) { reasoning.append(p); return true; },
                                       [&](std::string_view p) { answer.append(p); return true; });
      for (const std::string& p : pieces) ASSERT_TRUE(stream.Push(p));
      EXPECT_EQ(reasoning, want.reasoning) << absl::CEscape(reply) << " in " << pieces.size() << " pieces";
      // An undecided start ("<th" and nothing after) is held back: the reply ended in it.
      if (reply != "<th") {
        EXPECT_EQ(answer, want.answer) << absl::CEscape(reply) << " in " << pieces.size() << " pieces";
      }
    }
  }
  // A sink that asks to stop stops the stream.
  internal::ReasoningStream stop([](std::string_view) { return false; }, nullptr);
  EXPECT_FALSE(stop.Push("<think>x y"));
}

TEST(ChatTemplateTest, ReasoningTemplatesOtherThanQwen3AreRefused) {
  EXPECT_THAT(ChatTemplate::FromJinja("<|im_start|> {{ '<think>' }} deepseek"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("other than Qwen3's")));
  auto qwen3 = ChatTemplate::FromJinja("<|im_start|> <think> reasoning_content last_query_index enable_thinking");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_TRUE(qwen3->supports_reasoning());
  EXPECT_EQ(qwen3->Describe(), "chatml (qwen3 reasoning)");
  EXPECT_FALSE(ChatTemplate::ForFormat(ChatFormat::kChatML).supports_reasoning());
}

TEST(ChatTemplateTest, DetectsFamilies) {
  EXPECT_EQ(ChatTemplate::FromJinja("{{ '<|start_header_id|>' }}")->Describe(), "llama3 (3.0)");
  EXPECT_EQ(ChatTemplate::FromJinja("<|start_header_id|> Cutting Knowledge Date")->Describe(), "llama3 (3.1+)");
  EXPECT_EQ(ChatTemplate::FromJinja("{{ '[INST] ' + content + ' [/INST]' }}")->Describe(), "mistral");
  EXPECT_EQ(ChatTemplate::FromJinja("<|user|>\n...<|assistant|>")->Describe(), "zephyr");
  EXPECT_EQ(ChatTemplate::FromJinja("<start_of_turn>user")->Describe(), "gemma");
  EXPECT_EQ(ChatTemplate::FromJinja("<|im_start|>{{ message.role }}")->Describe(), "chatml");
  EXPECT_THAT(ChatTemplate::FromJinja("{% for m in messages %}### {{ m.content }}{% endfor %}"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("ChatTemplate::ForFormat")));
  EXPECT_EQ(ChatTemplate::FromJinja("<|user|> <|end|> <|assistant|>")->Describe(), "phi3");  // not Zephyr
  EXPECT_EQ(ChatTemplate::FromJinja("<|im_start|>{{ role }}<|im_sep|>")->Describe(), "phi4");  // not ChatML
  EXPECT_THAT(ChatTemplate::FromJinja("{{ '<|' + message['role'] + '|>' }}<|user|><|assistant|><|end|><|tool|>"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("Phi-4-mini")));
  EXPECT_THAT(ChatTemplate::FromJinja("<|im_start|> <think>"), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("<think>")));
  EXPECT_THAT(ChatTemplate::FromJinja("<|im_start|> <tools> You are a function calling AI model."),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("tool section other than Qwen2.5's")));
  // Llama 3.2+ writes today's date.
  auto llama32 = ChatTemplate::FromJinja("<|start_header_id|> Cutting Knowledge Date {{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(llama32.ok());
  char today[32];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(today, sizeof today, "%d %b %Y", &local);
  EXPECT_THAT(*llama32->Render({{"user", "x"}}, {}, false), HasSubstr(std::string("Today Date: ") + today + "\n"));
}

TEST(ChatTemplateTest, FamiliesWithoutVectors) {
  const std::vector<ChatMessage> chat = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  EXPECT_EQ(*ChatTemplate::ForFormat(ChatFormat::kMistral).Render(chat, {}, true),
            "<s>[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
  EXPECT_EQ(*ChatTemplate::ForFormat(ChatFormat::kZephyr).Render(chat, {}, true),
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nBye</s>\n<|assistant|>\n");
  EXPECT_EQ(*ChatTemplate::ForFormat(ChatFormat::kGemma).Render(chat, {}, true),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_THAT(ChatTemplate::ForFormat(ChatFormat::kGemma).Render({{"user", "a"}, {"system", "late"}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("can only come first")));
  EXPECT_EQ(*ChatTemplate::ForFormat(ChatFormat::kChatML).Render(chat, {}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
  EXPECT_EQ(*ChatTemplate::ForFormat(ChatFormat::kLlama3).Render({{"user", " Hi "}}, {}, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  EXPECT_THAT(ChatTemplate::ForFormat(ChatFormat::kMistral).Render({{"tool", "x"}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no 'tool' role")));
  // Nothing is dropped without a word (found by chat_template_fuzzer).
  EXPECT_THAT(ChatTemplate::ForFormat(ChatFormat::kZephyr).Render({{"user", "x"}, {"tool", "4"}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zephyr chat format has no 'tool' role")));
  EXPECT_THAT(ChatTemplate::ForFormat(ChatFormat::kMistral).Render({{"system", "Be brief."}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("followed by a user message")));
  EXPECT_THAT(ChatTemplate::ForFormat(ChatFormat::kMistral).Render({{"system", "s"}, {"assistant", "a"}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("followed by a user message")));
  EXPECT_EQ(*ChatTemplate::ForFormat(ChatFormat::kMistral).Render({{"system", "a"}, {"system", "b"}, {"user", "c"}}, {}, true),
            "<s>[INST] a\n\nb\n\nc [/INST]");
  EXPECT_THAT(ChatTemplate::ForFormat(ChatFormat::kGemma).Render({{"system", "Be brief."}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a turn after it")));
}

TEST(ChatTemplateTest, CustomFormatter) {
  ChatTemplate custom = ChatTemplate::Custom(
      [](const std::vector<ChatMessage>& messages, const std::vector<ToolDefinition>&, bool gen) -> absl::StatusOr<std::string> {
        std::string out;
        for (const ChatMessage& m : messages) out += m.role + ": " + m.content + "\n";
        return gen ? out + "assistant: " : out;
      });
  EXPECT_EQ(custom.Describe(), "custom");
  EXPECT_EQ(*custom.Render({{"user", "Hi"}}, {}, true), "user: Hi\nassistant: ");
}

TEST(ChatTemplateTest, BadToolJsonAndTooManyCalls) {
  ChatTemplate hermes =
      *ChatTemplate::FromJinja("<|im_start|> <tools> You may call one or more functions to assist with the user query.");
  ChatTemplate llama = ChatTemplate::ForFormat(ChatFormat::kLlama3);
  const std::vector<ToolDefinition> bad_tool = {{"t", "d", "{not json"}};
  EXPECT_THAT(hermes.Render({{"user", "x"}}, bad_tool, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parameters of tool 't' is not valid JSON")));
  ChatMessage call{"assistant", "", {{"1", "f", "[1, 2"}}};
  EXPECT_THAT(hermes.Render({{"user", "x"}, call}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arguments of the call to 'f'")));
  ChatMessage two{"assistant", "", {{"1", "f", "{}"}, {"2", "g", "{}"}}};
  EXPECT_THAT(llama.Render({{"user", "x"}, two}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takes one per turn")));
  EXPECT_THAT(llama.Render({{"system", "s"}}, {{"f", "d", "{}"}}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("there is none")));
}

TEST(ChatTemplateTest, ModelWithoutTemplate) {
  auto model = Model::Load(testing::WriteTinyModel(testing::TinyModelOptions{}, "no_template.gguf"));
  ASSERT_TRUE(model.ok());
  EXPECT_THAT(ChatTemplate::FromModel(**model), StatusIs(absl::StatusCode::kNotFound, HasSubstr("ForFormat")));
  EXPECT_THAT(ParseChatFormat("vicuna"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'vicuna'")));
  EXPECT_EQ(*ParseChatFormat("gemma"), ChatFormat::kGemma);
}

// json.dumps compatibility, checked against strings Python 3.11 produced.
TEST(PythonJsonTest, MatchesJsonDumps) {
  const Json v = Json::parse(R"({"b": 1, "a": [1.5, 1e-05, 1e16, 1e15, -0.0, 100.0, true, null],
                                 "s": "quote\" back\\ tab\t nl\n \u0001 é 中", "e": {}, "l": []})");
  EXPECT_EQ(PythonJsonDumps(v),
            R"({"b": 1, "a": [1.5, 1e-05, 1e+16, 1000000000000000.0, -0.0, 100.0, true, null], )"
            R"("s": "quote\" back\\ tab\t nl\n \u0001 é 中", "e": {}, "l": []})");
  EXPECT_EQ(PythonJsonDumps(Json::parse(R"({"a": [1, {"b": 2}], "c": {}})"), 4),
            "{\n    \"a\": [\n        1,\n        {\n            \"b\": 2\n        }\n    ],\n    \"c\": {}\n}");
  EXPECT_EQ(PythonJsonDumps(Json::parse("0.1")), "0.1");
  EXPECT_EQ(PythonJsonDumps(Json::parse("123456789.0")), "123456789.0");
  EXPECT_EQ(PythonJsonDumps(Json::parse("0.0001")), "0.0001");
  EXPECT_EQ(PythonJsonDumps(Json::parse("1.5e-7")), "1.5e-07");
  // Shortest round-trip digits, exponent form from 1e16 (reference: Python 3.11 repr).
  EXPECT_EQ(PythonJsonDumps(Json::parse("15212694943869152.0")), "1.5212694943869152e+16");
  EXPECT_EQ(PythonJsonDumps(Json::parse("7.1202363472230445e-307")), "7.120236347223045e-307");
  EXPECT_EQ(PythonJsonDumps(Json::parse("-2.5e-5")), "-2.5e-05");
}

TEST(PythonJsonTest, RejectsWhatItCannotWriteFaithfully) {
  EXPECT_THAT(ParseOrderedJson(std::string(200, '[') + std::string(200, ']'), "args"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("args nests deeper than 128")));
  EXPECT_THAT(ParseOrderedJson(R"({"n": 18446744073709551616})", "args"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("18446744073709551616, beyond 64 bits")));
  EXPECT_THAT(ParseOrderedJson(R"([-9223372036854775809])", "args"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(ParseOrderedJson(R"({"s": "[[[[ 99999999999999999999 ]]]]", "n": -9223372036854775808})", "args").ok());
  EXPECT_THAT(ParseOrderedJson("{", "args"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
}

}  // namespace
}  // namespace hetero

namespace hetero {
namespace {

// Phi-4 against its documented form (the llama.cpp renderer's, and microsoft/phi-4's template:
// "<|im_start|>ROLE<|im_sep|>CONTENT<|im_end|>", no newlines); Phi-3-mini-4k's template,
// which has no system turn and writes bos_token, refuses a system message rather than drop it.
TEST(ChatTemplateTest, PhiFormats) {
  const std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  auto phi4 = ChatTemplate::ForFormat(ChatFormat::kPhi4).Render(chat, {}, true);
  ASSERT_TRUE(phi4.ok());
  EXPECT_EQ(*phi4,
            "<|im_start|>system<|im_sep|>Be brief.<|im_end|><|im_start|>user<|im_sep|>Hi<|im_end|>"
            "<|im_start|>assistant<|im_sep|>Hello.<|im_end|><|im_start|>user<|im_sep|>Bye<|im_end|>"
            "<|im_start|>assistant<|im_sep|>");
  EXPECT_THAT(ChatTemplate::ForFormat(ChatFormat::kPhi4).Render({{"tool", "5"}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'tool'")));
  auto mini4k = ChatTemplate::FromJinja("{{ bos_token }}{{'<|user|>' + '\\n'}}<|end|>{{'<|assistant|>'}}");
  ASSERT_TRUE(mini4k.ok());
  EXPECT_THAT(mini4k->Render(chat, {}, true), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no system turn")));
  auto no_system = mini4k->Render({chat.begin() + 1, chat.end()}, {}, true);
  ASSERT_TRUE(no_system.ok());
  EXPECT_EQ(*no_system, "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n");
  EXPECT_THAT(ChatTemplate::ForFormat(ChatFormat::kPhi3).Render({{"tool", "5"}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'tool'")));
  EXPECT_EQ(*ParseChatFormat("phi4"), ChatFormat::kPhi4);
}

}  // namespace
}  // namespace hetero

namespace hetero {
namespace {

// Granite 3.0 beyond the jinja2 vectors: text the model wrote before its calls stays before
// the marker; the template's own roles pass through; a role it would drop is refused; the
// 3.1+ templates (dated default system prompt, documents, controls) are refused, not guessed.
TEST(ChatTemplateTest, Granite) {
  ChatTemplate granite = ChatTemplate::ForFormat(ChatFormat::kGranite);
  EXPECT_EQ(granite.Describe(), "granite");
  EXPECT_TRUE(granite.supports_tools());
  EXPECT_EQ(*ParseChatFormat("granite"), ChatFormat::kGranite);
  ChatMessage calling{"assistant", "Let me check."};
  calling.tool_calls = {{"c1", "weather", R"({"city": "Paris"})"}};
  auto text = granite.Render({{"user", "Weather?"}, calling, {"tool", "18 C"}}, {}, true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|start_of_role|>user<|end_of_role|>Weather?<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>Let me check.<|tool_call|>"
            "[{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}]<|end_of_text|>\n"
            "<|start_of_role|>tool_response<|end_of_role|>18 C<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>");
  auto own_roles = granite.Render({{"assistant_tool_call", "[]"}, {"tool_response", "x"}}, {}, false);
  ASSERT_TRUE(own_roles.ok());
  EXPECT_EQ(*own_roles,
            "<|start_of_role|>assistant<|end_of_role|><|tool_call|>[]<|end_of_text|>\n"
            "<|start_of_role|>tool_response<|end_of_role|>x<|end_of_text|>\n");
  EXPECT_EQ(*granite.Render({}, {}, true), "");  // the template opens the reply inside its loop
  EXPECT_THAT(granite.Render({{"ipython", "x"}}, {}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no 'ipython' role")));
  ChatMessage bad_args{"assistant", ""};
  bad_args.tool_calls = {{"c1", "weather", "{not json"}};
  EXPECT_THAT(granite.Render({bad_args}, {}, true), StatusIs(absl::StatusCode::kInvalidArgument));
  for (const char* later : {"<|start_of_role|> assistant_tool_call Knowledge Cutoff Date",
                            "<|start_of_role|> available_tools documents controls",
                            "<|start_of_role|>system<|end_of_role|>"}) {
    EXPECT_THAT(ChatTemplate::FromJinja(later),
                StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("other than Granite 3.0's")))
        << later;
  }
}

}  // namespace
}  // namespace hetero
