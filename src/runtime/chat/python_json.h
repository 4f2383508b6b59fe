// JSON text exactly as Python's json.dumps writes it (ensure_ascii=False, keys in
// insertion order), which is what chat templates' `tojson` filter produces under Hugging
// Face transformers. Prompts must match byte for byte, so nlohmann's own dump() (no space
// after ',' and ':') cannot be used.
#ifndef HETERO_RUNTIME_CHAT_PYTHON_JSON_H_
#define HETERO_RUNTIME_CHAT_PYTHON_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace hetero {

// json.dumps(value, ensure_ascii=False) when indent < 0, else json.dumps(..., indent=indent).
std::string PythonJsonDumps(const nlohmann::ordered_json& value, int indent = -1);

// Parses JSON text keeping key order; errors name `what`.
absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(absl::string_view text, absl::string_view what);

}  // namespace hetero

#endif  // HETERO_RUNTIME_CHAT_PYTHON_JSON_H_
