#include "examples/tools/lookup_table.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "examples/tools/tool_arguments.h"
#include "nlohmann/json.hpp"

namespace hetero::example_tools {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> previous(b.size() + 1);
  std::vector<size_t> current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

// Words that say something about the entry: short glue words like "of" match everything.
std::vector<std::string_view> SignificantWords(std::string_view text) {
  std::vector<std::string_view> words;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(start, end - start);
    if (word.size() >= 3 && word != "the" && word != "and") words.push_back(word);
    start = end + 1;
  }
  return words;
}

}  // namespace

std::string NormalizeLookupKey(std::string_view key) {
  std::string normalized;
  bool pending_space = false;
  for (const char c : key) {
    if (IsSpace(c)) {
      pending_space = !normalized.empty();
      continue;
    }
    if (pending_space) normalized += ' ';
    pending_space = false;
    normalized += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  return normalized;
}

absl::StatusOr<LookupTable> LookupTable::FromJsonText(std::string_view json_text,
                                                      std::string_view source_name) {
  const nlohmann::json object =
      nlohmann::json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source_name), ": not valid JSON"));
  }
  if (!object.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(source_name), ": must hold one JSON object of key -> string or number, not ",
        JsonTypeName(object)));
  }
  LookupTable table;
  for (const auto& [key, value] : object.items()) {
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_number()) {
      text = value.dump();  // as written: 8849, 78.37
    } else {
      return absl::InvalidArgumentError(absl::StrCat(std::string(source_name), ": the value of '",
                                                     key, "' must be a string or a number, not ",
                                                     JsonTypeName(value)));
    }
    std::string normalized = NormalizeLookupKey(key);
    if (normalized.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(source_name), ": a key is empty"));
    }
    if (!table.entries_.emplace(std::move(normalized), std::move(text)).second) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(source_name), ": duplicate key '",
                                                     key,
                                                     "' (keys match ignoring case and spaces)"));
    }
  }
  return table;
}

absl::StatusOr<LookupTable> LookupTable::LoadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open lookup file '", path, "'"));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  return FromJsonText(contents.str(), absl::StrCat("'", path, "'"));
}

absl::StatusOr<std::string> LookupTable::Find(std::string_view key) const {
  const std::string normalized = NormalizeLookupKey(key);
  if (normalized.empty()) return absl::InvalidArgumentError("the key is empty");
  const size_t characters = std::count_if(normalized.begin(), normalized.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  });
  if (characters > kMaxLookupKeyCharacters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the key is too long: ", characters, " characters (limit ", kMaxLookupKeyCharacters, ")"));
  }
  const auto it = entries_.find(normalized);
  if (it != entries_.end()) return it->second;
  std::string message = absl::StrCat("no entry for '", normalized, "'");
  const std::vector<std::string> close = ClosestKeys(normalized, kMaxLookupSuggestions);
  if (!close.empty()) {
    absl::StrAppend(&message, "; close keys: '", absl::StrJoin(close, "', '"), "'");
  }
  return absl::NotFoundError(message);
}

std::vector<std::string> LookupTable::ClosestKeys(std::string_view key, size_t limit) const {
  const std::string query = NormalizeLookupKey(key);
  if (query.empty()) return {};
  const std::vector<std::string_view> query_words = SignificantWords(query);
  const size_t max_edits = std::max<size_t>(2, query.size() / 4);
  // (tier, closeness within the tier, key): smaller is better.
  std::vector<std::tuple<int, size_t, std::string_view>> ranked;
  for (const auto& [candidate, value] : entries_) {
    const size_t length_difference = candidate.size() > query.size()
                                         ? candidate.size() - query.size()
                                         : query.size() - candidate.size();
    if (candidate.find(query) != std::string::npos || query.find(candidate) != std::string::npos) {
      ranked.emplace_back(0, length_difference, candidate);
      continue;
    }
    // Cheap bound first: the distance is at least the length difference.
    if (length_difference <= max_edits) {
      const size_t edits = EditDistance(query, candidate);
      if (edits <= max_edits) {
        ranked.emplace_back(1, edits, candidate);
        continue;
      }
    }
    const std::vector<std::string_view> candidate_words = SignificantWords(candidate);
    size_t shared = 0;
    for (const std::string_view word : query_words) {
      shared += std::count(candidate_words.begin(), candidate_words.end(), word) > 0;
    }
    if (shared > 0) ranked.emplace_back(2, query_words.size() - shared, candidate);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> keys;
  for (size_t i = 0; i < ranked.size() && i < limit; ++i) {
    keys.emplace_back(std::get<2>(ranked[i]));
  }
  return keys;
}

absl::StatusOr<Tool> MakeLookupTool(const std::string& path, std::string description) {
  absl::StatusOr<LookupTable> loaded = LookupTable::LoadFile(path);
  if (!loaded.ok()) return loaded.status();
  // Shared, not copied: the handler is copied with the Tool and may run on several threads
  // at once, which is safe because the table is never modified after loading.
  auto table = std::make_shared<const LookupTable>(*std::move(loaded));
  Tool tool;
  tool.name = "lookup";
  tool.description =
      description.empty()
          ? "Looks up a fact in a reference table by a short key phrase such as "
            "'capital of australia' or 'height of mount everest'. Case does not matter. An "
            "unknown key returns an error listing close keys to try."
          : std::move(description);
  tool.parameters_json = R"({
  "type": "object",
  "properties": {
    "key": {
      "type": "string",
      "minLength": 1,
      "maxLength": 128,
      "description": "What to look up, as a short phrase, e.g. capital of australia"
    }
  },
  "required": ["key"]
})";
  tool.handler = [table](const std::string& arguments_json) -> absl::StatusOr<std::string> {
    return RunWithoutExceptions("lookup", [&]() -> absl::StatusOr<std::string> {
      const absl::StatusOr<nlohmann::json> arguments = ParseArgumentsObject(arguments_json);
      if (!arguments.ok()) return arguments.status();
      const absl::StatusOr<std::string> key = RequiredString(*arguments, "key");
      if (!key.ok()) return key.status();
      return table->Find(*key);
    });
  };
  return tool;
}

}  // namespace hetero::example_tools
