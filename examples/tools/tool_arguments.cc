#include "examples/tools/tool_arguments.h"

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hetero::example_tools {
const char* JsonTypeName(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  return "an object";
}

absl::StatusOr<nlohmann::json> ParseArgumentsObject(std::string_view arguments_json) {
  nlohmann::json arguments = nlohmann::json::parse(arguments_json, /*cb=*/nullptr,
                                                   /*allow_exceptions=*/false);
  if (arguments.is_discarded()) {
    return absl::InvalidArgumentError("arguments are not valid JSON");
  }
  if (!arguments.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("arguments must be a JSON object, not ", JsonTypeName(arguments)));
  }
  return arguments;
}

absl::StatusOr<std::string> RequiredString(const nlohmann::json& arguments, std::string_view key) {
  const auto it = arguments.find(key);
  if (it == arguments.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing argument '", std::string(key), "'"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("argument '", std::string(key),
                                                   "' must be a string, not ", JsonTypeName(*it)));
  }
  return it->get_ref<const std::string&>();
}

absl::StatusOr<std::optional<std::string>> OptionalString(const nlohmann::json& arguments,
                                                          std::string_view key) {
  const auto it = arguments.find(key);
  if (it == arguments.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("argument '", std::string(key),
                                                   "' must be a string, not ", JsonTypeName(*it)));
  }
  return std::optional<std::string>(it->get_ref<const std::string&>());
}

absl::StatusOr<double> RequiredNumber(const nlohmann::json& arguments, std::string_view key) {
  const auto it = arguments.find(key);
  if (it == arguments.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing argument '", std::string(key), "'"));
  }
  if (!it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("argument '", std::string(key),
                                                   "' must be a number, not ", JsonTypeName(*it)));
  }
  return it->get<double>();
}

absl::StatusOr<std::string> RunWithoutExceptions(
    std::string_view tool_name, const std::function<absl::StatusOr<std::string>()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("tool '", std::string(tool_name), "' failed: ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat("tool '", std::string(tool_name), "' failed"));
  }
}

}  // namespace hetero::example_tools
