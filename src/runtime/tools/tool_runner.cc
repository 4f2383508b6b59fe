#include "src/runtime/tools/tool_runner.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/tokenizer/utf8.h"

namespace hetero::internal {
namespace {

using Clock = std::chrono::steady_clock;

// Shared between the waiting stage and a handler's thread, which may outlive the wait.
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::StatusOr<std::string> result = absl::UnknownError("not run");
};

}  // namespace

std::string TruncateResult(const std::string& text, size_t max_bytes, bool& truncated) {
  truncated = text.size() > max_bytes;
  if (!truncated) return text;
  // The note counts against the limit. Its length depends on the cut's digits, which only
  // shrink as the cut moves back, so one estimate from the limit is enough.
  auto note = [&](size_t cut) { return absl::StrCat("\n[truncated: ", cut, " of ", text.size(), " bytes shown]"); };
  std::string marker = note(max_bytes);
  const bool full_note = marker.size() <= max_bytes;
  if (!full_note) marker = "[truncated]";
  if (marker.size() > max_bytes) marker.clear();  // a limit too small for any note
  size_t cut = max_bytes - marker.size();
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  if (full_note) marker = note(cut);
  return absl::StrCat(text.substr(0, cut), marker);
}

std::vector<ToolRunResult> RunToolCalls(const ToolRegistry& registry, const std::vector<ParsedToolCall>& calls,
                                        int round, size_t max_result_bytes, const std::atomic<bool>* cancelled) {
  std::vector<ToolRunResult> results(calls.size());
  std::vector<std::shared_ptr<Pending>> pending(calls.size());
  std::vector<Clock::time_point> started(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const ParsedToolCall& call = calls[i];
    ToolCallReport& r = results[i].report;
    r.round = round;
    r.name = call.name;
    r.arguments_json = call.arguments_json;
    if (!call.error.empty()) {
      r.outcome = "parse_error";
      r.detail = call.error;
      results[i].content = absl::StrCat("error: the tool call could not be read: ", call.error);
      continue;
    }
    const Tool* tool = registry.Find(call.name);
    if (tool == nullptr) {
      std::vector<std::string> names;
      for (size_t t = 0; t < registry.size(); ++t) names.push_back(registry.tool(t).name);
      r.outcome = "unknown_tool";
      r.detail = absl::StrCat("no tool named '", call.name, "'");
      results[i].content = absl::StrCat("error: there is no tool named '", call.name, "'; the tools are: ",
                                        absl::StrJoin(names, ", "));
      continue;
    }
    if (absl::Status valid = registry.ValidateArguments(call.name, call.arguments_json); !valid.ok()) {
      r.outcome = "invalid_arguments";
      r.detail = std::string(valid.message());
      results[i].content = absl::StrCat("error: invalid arguments for ", call.name, ": ", valid.message());
      continue;
    }
    // The same call twice in one reply runs once; both get its result.
    bool duplicate = false;
    for (size_t j = 0; j < i && !duplicate; ++j) {
      if (pending[j] != nullptr && calls[j].name == call.name && calls[j].arguments_json == call.arguments_json) {
        pending[i] = pending[j];
        started[i] = started[j];
        duplicate = true;
      }
    }
    r.duplicate = duplicate;
    if (duplicate) continue;
    auto p = std::make_shared<Pending>();
    pending[i] = p;
    started[i] = Clock::now();
    std::thread([p, handler = tool->handler, args = call.arguments_json] {
      absl::StatusOr<std::string> out = absl::UnknownError("no result");
      try {
        out = handler(args);
      } catch (const std::exception& e) {
        out = absl::InternalError(absl::StrCat("the tool threw an exception: ", e.what()));
      } catch (...) {
        out = absl::InternalError("the tool threw an exception");
      }
      std::lock_guard<std::mutex> lock(p->mu);
      p->result = std::move(out);
      p->done = true;
      p->cv.notify_all();
    }).detach();
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    if (pending[i] == nullptr) continue;
    ToolCallReport& r = results[i].report;
    const Tool* tool = registry.Find(calls[i].name);
    const Clock::time_point deadline = started[i] + tool->timeout;
    Pending& p = *pending[i];
    std::unique_lock<std::mutex> lock(p.mu);
    // Wake now and then to notice a cancelled task.
    while (!p.done && Clock::now() < deadline && !(cancelled != nullptr && cancelled->load())) {
      p.cv.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
    }
    r.ms = std::chrono::duration<double, std::milli>(Clock::now() - started[i]).count();
    if (!p.done) {
      const bool was_cancelled = cancelled != nullptr && cancelled->load();
      r.outcome = "timeout";
      r.detail = was_cancelled ? "the task was cancelled while the tool ran"
                               : absl::StrCat("no result within ", tool->timeout.count(), " ms");
      results[i].content = absl::StrCat("error: ", calls[i].name, " did not answer within ", tool->timeout.count(), " ms");
      continue;
    }
    if (!p.result.ok()) {
      // The message goes into the prompt: invalid bytes in it are replaced, not passed on.
      std::string message;
      AppendUtf8Lossy(p.result.status().message(), message);
      r.outcome = "handler_error";
      r.detail = message;
      results[i].content = absl::StrCat("error: ", calls[i].name, " failed: ", message);
      continue;
    }
    if (!IsValidUtf8(*p.result)) {
      // Not text the model can be shown (nor the report's JSON carry): an error result.
      r.outcome = "handler_error";
      r.result_bytes = p.result->size();
      r.detail = absl::StrCat("the result (", p.result->size(), " bytes) is not valid UTF-8");
      results[i].content = absl::StrCat("error: ", calls[i].name, " returned bytes that are not valid UTF-8 text");
      continue;
    }
    r.outcome = "ok";
    r.result_bytes = p.result->size();
    results[i].content = TruncateResult(*p.result, max_result_bytes, r.truncated);
  }
  return results;
}

}  // namespace hetero::internal

namespace hetero {

ToolInvocation InvokeTool(const ToolRegistry& registry, const std::string& name, const std::string& arguments_json,
                          size_t max_result_bytes) {
  ParsedToolCall call;
  call.name = name;
  call.raw = arguments_json;
  // As the parser would hand it over: compact JSON, or the reason it is not an object.
  const nlohmann::json parsed = nlohmann::json::parse(arguments_json, nullptr, false);
  if (parsed.is_discarded()) {
    call.error = "arguments are not valid JSON";
  } else if (!parsed.is_object()) {
    call.error = "arguments are not a JSON object";
  } else {
    call.arguments_json = parsed.dump();
  }
  std::vector<internal::ToolRunResult> runs = internal::RunToolCalls(registry, {call}, 0, max_result_bytes, nullptr);
  return ToolInvocation{std::move(runs[0].content), std::move(runs[0].report)};
}

}  // namespace hetero
