#include "examples/intents.h"

#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace hetero::bench {

absl::StatusOr<std::vector<IntentLine>> LoadIntentLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the labelled set '", path, "'"));
  std::vector<IntentLine> lines;
  bool exemplar = false;
  std::string raw;
  for (int n = 1; std::getline(in, raw); ++n) {
    if (raw.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(raw, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string() || !j.contains("intent") ||
        !j["intent"].is_string() || !j.contains("split") || !j["split"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": expected {\"text\", \"intent\", \"split\"} strings"));
    }
    lines.push_back({j["text"], j["intent"], j["split"]});
    exemplar = exemplar || lines.back().split == "exemplar";
  }
  if (!exemplar) return absl::InvalidArgumentError(absl::StrCat(path, " has no exemplar lines"));
  return lines;
}

std::vector<Route> ExemplarRoutes(const std::vector<IntentLine>& lines,
                                  const std::function<std::string(const std::string& intent)>& action_of) {
  std::map<std::string, std::vector<std::string>> exemplars;
  for (const IntentLine& l : lines) {
    if (l.split == "exemplar") exemplars[l.intent].push_back(l.text);
  }
  std::vector<Route> routes;
  for (const auto& [intent, examples] : exemplars) routes.push_back({intent, examples, action_of(intent)});
  return routes;
}

}  // namespace hetero::bench
