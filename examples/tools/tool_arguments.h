// Reading a tool's arguments (a JSON object as text) without exceptions, and running a
// handler so that nothing thrown inside it escapes to the agent loop. Shared by the example
// tools; each error message names the argument so that the model can correct its call.
#ifndef HETERO_EXAMPLES_TOOLS_TOOL_ARGUMENTS_H_
#define HETERO_EXAMPLES_TOOLS_TOOL_ARGUMENTS_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace hetero::example_tools {

// "a string", "a number", "null", ...: for messages such as "must be a string, not null".
const char* JsonTypeName(const nlohmann::json& value);

// InvalidArgument unless `arguments_json` is a JSON object.
absl::StatusOr<nlohmann::json> ParseArgumentsObject(std::string_view arguments_json);

// InvalidArgument when `key` is missing or not a string.
absl::StatusOr<std::string> RequiredString(const nlohmann::json& arguments, std::string_view key);
// Nullopt when `key` is absent or null; InvalidArgument when it is not a string.
absl::StatusOr<std::optional<std::string>> OptionalString(const nlohmann::json& arguments,
                                                          std::string_view key);
// InvalidArgument when `key` is missing or not a number (integers are accepted).
absl::StatusOr<double> RequiredNumber(const nlohmann::json& arguments, std::string_view key);

// Calls `body` and turns any exception into an Internal error naming the tool: the handler
// runs on a pool thread of the library, where an escaping exception would end the process.
absl::StatusOr<std::string> RunWithoutExceptions(
    std::string_view tool_name, const std::function<absl::StatusOr<std::string>()>& body);

}  // namespace hetero::example_tools

#endif  // HETERO_EXAMPLES_TOOLS_TOOL_ARGUMENTS_H_
