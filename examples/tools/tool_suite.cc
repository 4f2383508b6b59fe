#include "examples/tools/tool_suite.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "examples/tools/calculator.h"
#include "examples/tools/current_time.h"
#include "examples/tools/lookup_table.h"
#include "examples/tools/unit_converter.h"
#include "nlohmann/json.hpp"

namespace hetero::example_tools {

absl::StatusOr<std::vector<SuiteQuestion>> LoadSuite(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the suite '", path, "'"));
  std::vector<SuiteQuestion> questions;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const nlohmann::json q = nlohmann::json::parse(line, nullptr, false);
    const auto is_string = [&q](const char* key) { return q.contains(key) && q[key].is_string(); };
    if (q.is_discarded() || !q.is_object() || !is_string("question") || !is_string("answer") || !is_string("check") ||
        (q["check"] != "number" && q["check"] != "text")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad suite line (want {\"question\": str, \"answer\": str, \"check\": \"number\"|\"text\"}) ", path, ":",
          number, ": ", line));
    }
    questions.push_back({is_string("id") ? q["id"].get<std::string>() : absl::StrCat("line-", number),
                         q["question"].get<std::string>(), q["answer"].get<std::string>(),
                         q["check"].get<std::string>()});
  }
  return questions;
}

absl::StatusOr<std::shared_ptr<ToolRegistry>> MakeSuiteTools(const std::string& facts_path, bool fixed_clock) {
  auto tools = std::make_shared<ToolRegistry>();
  auto add = [&](Tool t) { return tools->Register(std::move(t)); };
  if (absl::Status s = add(MakeCalculatorTool()); !s.ok()) return s;
  if (absl::Status s = add(MakeUnitConversionTool()); !s.ok()) return s;
  Clock clock = [] { return std::chrono::system_clock::now(); };
  if (fixed_clock) {
    // The suite's date questions expect 2026-11-29 (tests/data/tool_suite.md).
    clock = [] { return std::chrono::system_clock::time_point(std::chrono::seconds(1795953600)); };
  }
  if (absl::Status s = add(MakeCurrentTimeTool(clock)); !s.ok()) return s;
  if (std::ifstream(facts_path).good()) {
    auto lookup = MakeLookupTool(facts_path,
                                 "Looks up a fact (capitals, city populations, heights, distances, dates) by a short "
                                 "key such as 'capital of france'.");
    if (!lookup.ok()) return lookup.status();
    if (absl::Status s = add(std::move(*lookup)); !s.ok()) return s;
  } else {
    std::fprintf(stderr, "note: no facts file at %s; the lookup tool is not offered\n", facts_path.c_str());
  }
  return tools;
}

namespace {

// Numbers in free text: optional sign ('-' or U+2212), thousands commas, decimals.
std::vector<double> NumbersIn(std::string text) {
  // U+2212 MINUS SIGN as '-' (built anew: GCC 12 warns falsely on an in-place replace).
  text = absl::StrReplaceAll(text, {{"\xE2\x88\x92", "-"}});
  std::vector<double> out;
  for (size_t i = 0; i < text.size();) {
    const bool sign = text[i] == '-' && i + 1 < text.size() && absl::ascii_isdigit(text[i + 1]);
    if (!absl::ascii_isdigit(text[i]) && !sign) {
      ++i;
      continue;
    }
    std::string digits;
    size_t j = i;
    if (sign) digits.push_back(text[j++]);
    while (j < text.size() && (absl::ascii_isdigit(text[j]) || text[j] == '.' ||
                               (text[j] == ',' && j + 1 < text.size() && absl::ascii_isdigit(text[j + 1])))) {
      if (text[j] != ',') digits.push_back(text[j]);
      ++j;
    }
    while (!digits.empty() && digits.back() == '.') digits.pop_back();
    double v;
    if (absl::SimpleAtod(digits, &v)) out.push_back(v);
    i = j;
  }
  return out;
}

}  // namespace

bool AnswerIsCorrect(const std::string& answer, const std::string& expected, const std::string& check) {
  if (check == "text") return absl::AsciiStrToLower(answer).find(absl::AsciiStrToLower(expected)) != std::string::npos;
  double want;
  if (!absl::SimpleAtod(expected, &want)) return false;
  for (double got : NumbersIn(answer)) {
    if (want == 0 ? std::fabs(got) <= 1e-9 : std::fabs(got - want) <= 0.005 * std::fabs(want)) return true;
  }
  return false;
}


}  // namespace hetero::example_tools
