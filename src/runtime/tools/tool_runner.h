// Running the calls of one ToolCall stage: calls that did not parse, name no registered
// tool or break their schema become error results at once; the others run concurrently,
// each on its own thread and bounded by its tool's timeout. A handler that overruns is
// abandoned (its thread finishes in the background and its result is dropped); one that
// throws is caught. Every call yields a result text for the model and a report entry.
#ifndef HETERO_RUNTIME_TOOLS_TOOL_RUNNER_H_
#define HETERO_RUNTIME_TOOLS_TOOL_RUNNER_H_

#include <atomic>
#include <string>
#include <vector>

#include "hetero/engine.h"
#include "hetero/tools.h"

namespace hetero::internal {

struct ToolRunResult {
  std::string content;  // what the model reads
  ToolCallReport report;
};

std::vector<ToolRunResult> RunToolCalls(const ToolRegistry& registry, const std::vector<ParsedToolCall>& calls,
                                        int round, size_t max_result_bytes, const std::atomic<bool>* cancelled);

// `text` cut to at most `max_bytes` on a UTF-8 boundary, with a note saying so.
std::string TruncateResult(const std::string& text, size_t max_bytes, bool& truncated);

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_TOOL_RUNNER_H_
