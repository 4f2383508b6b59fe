// The `lookup` tool: answers a key from a table of facts loaded from a JSON file holding
// one object of key -> string or number, e.g. {"capital of australia": "Canberra"}. Keys
// match ignoring case and extra spaces; an unknown key's error suggests close keys so that
// the model can retry with one of them.
#ifndef HETERO_EXAMPLES_TOOLS_LOOKUP_TABLE_H_
#define HETERO_EXAMPLES_TOOLS_LOOKUP_TABLE_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/tools.h"

namespace hetero::example_tools {

inline constexpr int kMaxLookupKeyCharacters = 128;
inline constexpr size_t kMaxLookupSuggestions = 5;

// Trimmed, ASCII-lowercased, with runs of whitespace made one space.
std::string NormalizeLookupKey(std::string_view key);

class LookupTable {
 public:
  // InvalidArgument (naming `source_name`) when `json_text` is not one JSON object, a value
  // is neither a string nor a number, a key is empty, or two keys normalize alike.
  static absl::StatusOr<LookupTable> FromJsonText(std::string_view json_text,
                                                  std::string_view source_name);
  // As FromJsonText, reading `path`; NotFound when the file cannot be opened.
  static absl::StatusOr<LookupTable> LoadFile(const std::string& path);

  // The value's text (a number as written in JSON). InvalidArgument for an empty key;
  // NotFound "no entry for 'xyz'" listing up to kMaxLookupSuggestions close keys.
  absl::StatusOr<std::string> Find(std::string_view key) const;

  // Up to `limit` keys close to `key`, best first: keys containing it or contained in it,
  // then keys within a small edit distance, then keys sharing a word with it.
  std::vector<std::string> ClosestKeys(std::string_view key, size_t limit) const;

  size_t size() const { return entries_.size(); }

 private:
  std::map<std::string, std::string> entries_;  // normalized key -> value text
};

// A `lookup` tool serving the table in `path` (loaded now; errors as LoadFile). The
// description tells the model what the table holds; the default one is generic.
// Arguments: {"key": string}.
absl::StatusOr<Tool> MakeLookupTool(const std::string& path, std::string description = "");

}  // namespace hetero::example_tools

#endif  // HETERO_EXAMPLES_TOOLS_LOOKUP_TABLE_H_
