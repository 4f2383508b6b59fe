// The agent loop's tool runner: failures are results, never crashes or hangs. A tool that
// throws, one that hangs past its timeout, one that returns 1 MB, unknown tools, invalid
// arguments and unparsable calls each give the model an error or truncated result and the
// report the right outcome; valid calls run concurrently.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/tools.h"
#include "src/runtime/tools/reply_stream.h"
#include "src/runtime/tokenizer/utf8.h"
#include "src/runtime/tools/tool_runner.h"

namespace hetero::internal {
namespace {

using ::testing::HasSubstr;

constexpr char kSchema[] = R"({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})";

Tool MakeTool(std::string name, std::function<absl::StatusOr<std::string>(const std::string&)> handler,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
  Tool t;
  t.name = std::move(name);
  t.description = "test";
  t.parameters_json = kSchema;
  t.handler = std::move(handler);
  t.timeout = timeout;
  return t;
}

ParsedToolCall Call(std::string name, std::string args) {
  ParsedToolCall c;
  c.name = std::move(name);
  c.arguments_json = std::move(args);
  return c;
}

TEST(ToolRunnerTest, FailuresBecomeResults) {
  ToolRegistry tools;
  auto release = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(tools.Register(MakeTool("echo", [](const std::string& a) -> absl::StatusOr<std::string> { return a; })).ok());
  ASSERT_TRUE(tools.Register(MakeTool("throws", [](const std::string&) -> absl::StatusOr<std::string> {
                throw std::runtime_error("boom");
              })).ok());
  ASSERT_TRUE(tools.Register(MakeTool("fails", [](const std::string&) -> absl::StatusOr<std::string> {
                return absl::UnavailableError("backend down");
              })).ok());
  ASSERT_TRUE(tools.Register(MakeTool(
                  "hangs",
                  [release](const std::string&) -> absl::StatusOr<std::string> {
                    while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    return std::string("late");
                  },
                  std::chrono::milliseconds(150)))
                  .ok());
  ASSERT_TRUE(tools.Register(MakeTool("huge", [](const std::string&) -> absl::StatusOr<std::string> {
                std::string s(1 << 20, 'a');
                s.replace(960, 2, "\xc3\xa9");  // a 2-byte character across the cut (1001 less the note)
                return s;
              })).ok());
  ParsedToolCall broken;
  broken.error = "invalid JSON: at byte 7";
  broken.raw = "{\"name\": ";
  const std::vector<ParsedToolCall> calls = {
      Call("echo", R"({"x":1})"),  Call("throws", R"({"x":1})"), Call("fails", R"({"x":1})"),
      Call("hangs", R"({"x":1})"), Call("huge", R"({"x":1})"),   Call("nope", R"({"x":1})"),
      Call("echo", R"({"x":"one"})"), broken};
  const auto start = std::chrono::steady_clock::now();
  std::vector<ToolRunResult> r = RunToolCalls(tools, calls, 2, 1001, nullptr);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  release->store(true);  // let the abandoned thread finish
  ASSERT_EQ(r.size(), calls.size());
  EXPECT_EQ(r[0].report.outcome, "ok");
  EXPECT_EQ(r[0].content, R"({"x":1})");
  EXPECT_EQ(r[0].report.round, 2);
  EXPECT_EQ(r[1].report.outcome, "handler_error");
  EXPECT_THAT(r[1].content, HasSubstr("threw an exception: boom"));
  EXPECT_EQ(r[2].report.outcome, "handler_error");
  EXPECT_THAT(r[2].content, HasSubstr("backend down"));
  EXPECT_EQ(r[3].report.outcome, "timeout");
  EXPECT_THAT(r[3].content, HasSubstr("did not answer within 150 ms"));
  EXPECT_GE(r[3].report.ms, 150);
  EXPECT_EQ(r[4].report.outcome, "ok");
  EXPECT_TRUE(r[4].report.truncated);
  EXPECT_EQ(r[4].report.result_bytes, size_t{1} << 20);
  EXPECT_THAT(r[4].content, HasSubstr("[truncated: 960 of 1048576 bytes shown]"));  // not inside the 2-byte é
  EXPECT_LE(r[4].content.size(), 1001u) << "the note counts against the limit";
  EXPECT_EQ(r[5].report.outcome, "unknown_tool");
  EXPECT_THAT(r[5].content, HasSubstr("no tool named 'nope'; the tools are: echo, throws, fails, hangs, huge"));
  EXPECT_EQ(r[6].report.outcome, "invalid_arguments");
  EXPECT_THAT(r[6].content, HasSubstr("arguments.x: expected integer"));
  EXPECT_EQ(r[7].report.outcome, "parse_error");
  EXPECT_THAT(r[7].content, HasSubstr("invalid JSON: at byte 7"));
  EXPECT_LT(ms, 1500) << "the hanging tool must not hold the others up past its timeout";
}

// Fault injection: bytes that are not UTF-8 never reach the prompt or the report.
// Every limit, down to none: what the model sees never exceeds it, note included, and the
// cut never splits a character.
TEST(ToolRunnerTest, TruncatedResultsStayWithinTheLimit) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += i % 3 == 0 ? "\xc3\xa9" : "ab";  // é and ASCII, 80 bytes
  for (size_t limit = 0; limit <= text.size() + 1; ++limit) {
    bool truncated = false;
    const std::string shown = TruncateResult(text, limit, truncated);
    EXPECT_EQ(truncated, text.size() > limit) << limit;
    EXPECT_LE(shown.size(), std::max(limit, truncated ? size_t{0} : text.size())) << limit;
    if (!truncated) {
      EXPECT_EQ(shown, text);
      continue;
    }
    const size_t kept = std::min(shown.find("\n[truncated"), shown.find("[truncated]"));
    const size_t prefix = kept == std::string::npos ? shown.size() : kept;
    EXPECT_EQ(shown.substr(0, prefix), text.substr(0, prefix)) << limit;
    EXPECT_FALSE(prefix < text.size() && (static_cast<unsigned char>(text[prefix]) & 0xC0) == 0x80)
        << "cut inside a character at limit " << limit;
    if (limit >= 40) {
      EXPECT_THAT(shown, HasSubstr(absl::StrCat("[truncated: ", prefix, " of 80 bytes shown]")));
    }
  }
}

TEST(ToolRunnerTest, InvalidUtf8BecomesAnErrorResult) {
  ToolRegistry tools;
  ASSERT_TRUE(tools.Register(MakeTool("binary", [](const std::string&) -> absl::StatusOr<std::string> {
                return std::string("ok \xff\xfe then \xc3", 11);
              })).ok());
  ASSERT_TRUE(tools.Register(MakeTool("bad_error", [](const std::string&) -> absl::StatusOr<std::string> {
                return absl::InternalError("disk \xe2\x82 failed");
              })).ok());
  ASSERT_TRUE(tools.Register(MakeTool("text", [](const std::string&) -> absl::StatusOr<std::string> {
                return std::string("caf\xc3\xa9");
              })).ok());
  std::vector<ToolRunResult> r =
      RunToolCalls(tools, {Call("binary", R"({"x":1})"), Call("bad_error", R"({"x":2})"), Call("text", R"({"x":3})")}, 0, 1000, nullptr);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].report.outcome, "handler_error");
  EXPECT_THAT(r[0].report.detail, HasSubstr("not valid UTF-8"));
  EXPECT_EQ(r[0].report.result_bytes, 11u);
  EXPECT_THAT(r[0].content, HasSubstr("binary returned bytes that are not valid UTF-8"));
  EXPECT_EQ(r[1].report.outcome, "handler_error");
  EXPECT_THAT(r[1].content, HasSubstr("failed: disk \xef\xbf\xbd failed"));  // U+FFFD for the bad bytes
  EXPECT_EQ(r[2].report.outcome, "ok");
  EXPECT_EQ(r[2].content, "caf\xc3\xa9");
  for (const ToolRunResult& result : r) {
    EXPECT_TRUE(IsValidUtf8(result.content)) << result.content;
    EXPECT_TRUE(IsValidUtf8(result.report.detail)) << result.report.detail;
  }
}

TEST(ToolRunnerTest, CallsRunConcurrentlyAndDuplicatesOnce) {
  // Each distinct call waits until all three have started: only calls that run at the same
  // time can all get there (no wall-clock bound, which a loaded machine could miss).
  struct Meeting {
    std::mutex mu;
    std::condition_variable cv;
    int started = 0;
    int met = 0;
  };
  ToolRegistry tools;
  auto meeting = std::make_shared<Meeting>();
  auto runs = std::make_shared<std::atomic<int>>(0);
  ASSERT_TRUE(tools.Register(MakeTool("slow", [runs, meeting](const std::string& a) -> absl::StatusOr<std::string> {
                ++*runs;
                std::unique_lock<std::mutex> lock(meeting->mu);
                ++meeting->started;
                meeting->cv.notify_all();
                if (meeting->cv.wait_for(lock, std::chrono::seconds(20), [&] { return meeting->started >= 3; })) {
                  ++meeting->met;
                }
                return a;
              }, std::chrono::seconds(30))).ok());
  const std::vector<ParsedToolCall> calls = {Call("slow", R"({"x":1})"), Call("slow", R"({"x":2})"),
                                             Call("slow", R"({"x":3})"), Call("slow", R"({"x":1})")};
  std::vector<ToolRunResult> r = RunToolCalls(tools, calls, 0, 100, nullptr);
  EXPECT_EQ(meeting->met, 3) << "the three distinct calls ran at the same time";
  EXPECT_EQ(runs->load(), 3);
  EXPECT_EQ(r[3].content, R"({"x":1})");
  EXPECT_EQ(r[3].report.outcome, "ok");
  EXPECT_TRUE(r[3].report.duplicate);
  EXPECT_FALSE(r[0].report.duplicate);
  EXPECT_FALSE(r[1].report.duplicate);
}

TEST(ToolRunnerTest, CancellationEndsTheWait) {
  ToolRegistry tools;
  auto release = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(tools.Register(MakeTool(
                  "slow",
                  [release](const std::string&) -> absl::StatusOr<std::string> {
                    while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    return std::string("x");
                  },
                  std::chrono::milliseconds(20000)))
                  .ok());
  std::atomic<bool> cancelled{true};
  const auto start = std::chrono::steady_clock::now();
  std::vector<ToolRunResult> r = RunToolCalls(tools, {Call("slow", R"({"x":1})")}, 0, 100, &cancelled);
  const double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  release->store(true);  // let the abandoned thread finish
  EXPECT_LT(waited, 10000) << "cancellation, not the 20 s tool timeout, ended the wait";
  EXPECT_EQ(r[0].report.outcome, "timeout");
  EXPECT_THAT(r[0].report.detail, HasSubstr("cancelled"));
}

// What reaches on_text: answer text only.
std::string Stream(ToolCallFormat format, const std::vector<std::string>& pieces) {
  std::string out;
  ReplyStream s(format, [&](std::string_view t) {
    out += t;
    return true;
  });
  for (const std::string& p : pieces) EXPECT_TRUE(s.Push(p));
  return out;
}

TEST(ReplyStreamTest, ShowsOnlyAnswerText) {
  EXPECT_EQ(Stream(ToolCallFormat::kGeneric, {"{\"resp", "onse\": \"It", " is \\\"4\\\"\\n", "\\u00e9.\"}"}),
            "It is \"4\"\né.");
  EXPECT_EQ(Stream(ToolCallFormat::kGeneric, {"{\"tool_", "calls\": [{\"name\": \"x\"}]}"}), "");
  EXPECT_EQ(Stream(ToolCallFormat::kGeneric, {"Plain ", "words"}), "Plain words");
  EXPECT_EQ(Stream(ToolCallFormat::kHermes, {"Let me <", "tool_ca", "ll>{\"name\": 1}</tool", "_call> done", " <b>"}),
            "Let me  done <b>");
  EXPECT_EQ(Stream(ToolCallFormat::kLlama3, {"  {\"name\"", ": 1}"}), "");
  EXPECT_EQ(Stream(ToolCallFormat::kLlama3, {"  The", " answer"}), "  The answer");
  // Granite: the text before <|tool_call|>, however the marker is split; nothing after it.
  const std::string granite = "Let me check. <|tool_call|>[{\"name\": \"x\", \"arguments\": {}}] trailing";
  for (size_t cut = 0; cut <= granite.size(); ++cut) {
    EXPECT_EQ(Stream(ToolCallFormat::kGranite, {granite.substr(0, cut), granite.substr(cut)}), "Let me check. ") << cut;
  }
  std::vector<std::string> bytes;
  for (char c : granite) bytes.push_back(std::string(1, c));
  EXPECT_EQ(Stream(ToolCallFormat::kGranite, bytes), "Let me check. ");
  EXPECT_EQ(Stream(ToolCallFormat::kGranite, {"a <|tool", "_c", "all>", " b"}), "a <|tool_call> b");
}

}  // namespace
}  // namespace hetero::internal
