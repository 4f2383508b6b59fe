// The tool-calling question suite (tests/data/tool_suite.jsonl, described in
// tests/data/tool_suite.md): loading it, the example tools it is run with, and checking an
// answer. Shared by hetero-agent --suite and hetero-bench --agentic.
#ifndef HETERO_EXAMPLES_TOOLS_TOOL_SUITE_H_
#define HETERO_EXAMPLES_TOOLS_TOOL_SUITE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/tools.h"

namespace hetero::example_tools {

inline constexpr char kDefaultFactsPath[] = "tests/data/tool_suite_facts.json";

struct SuiteQuestion {
  std::string id;
  std::string question;
  std::string answer;
  std::string check;  // "number" or "text"
};

// InvalidArgument naming the line for anything but {"question", "answer", "check"} objects
// (check "number" or "text"; "id" optional); NotFound when the file cannot be read.
absl::StatusOr<std::vector<SuiteQuestion>> LoadSuite(const std::string& path);

// The calculator, unit converter, clock and (when `facts_path` exists) lookup tools. With
// `fixed_clock` the clock says 2026-11-29T12:00:00Z, as the suite's date questions expect.
absl::StatusOr<std::shared_ptr<ToolRegistry>> MakeSuiteTools(const std::string& facts_path, bool fixed_clock);

// Whether `answer` contains the expected one: a number within 0.5% (or 1e-9 of 0), or the
// text, case-insensitively (tests/data/tool_suite.md).
bool AnswerIsCorrect(const std::string& answer, const std::string& expected, const std::string& check);

}  // namespace hetero::example_tools

#endif  // HETERO_EXAMPLES_TOOLS_TOOL_SUITE_H_
