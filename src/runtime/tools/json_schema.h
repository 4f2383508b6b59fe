// The JSON-schema subset hetero supports for tool arguments (listed in hetero/tools.h),
// compiled into a tree that validates values and drives constrained decoding. Anything
// outside the subset is refused when compiling, naming the keyword and its path.
#ifndef HETERO_RUNTIME_TOOLS_JSON_SCHEMA_H_
#define HETERO_RUNTIME_TOOLS_JSON_SCHEMA_H_

#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace hetero::internal {

enum class SchemaType { kObject, kArray, kString, kNumber, kInteger, kBoolean, kNull };

struct SchemaNode {
  SchemaType type = SchemaType::kObject;
  // Non-empty: the value must equal one of these (enum, or const as a single value).
  std::vector<nlohmann::json> allowed;
  // Objects: properties in declaration order (the order constrained decoding writes them).
  struct Property {
    std::string key;
    std::unique_ptr<SchemaNode> schema;
    bool required = false;
  };
  std::vector<Property> properties;
  // Arrays.
  std::unique_ptr<SchemaNode> items;
  int min_items = 0;
  int max_items = -1;  // -1: unbounded
  // Strings, in Unicode code points.
  int min_length = 0;
  int max_length = -1;
  // Numbers and integers.
  std::optional<double> minimum;
  std::optional<double> maximum;
};

class CompiledSchema {
 public:
  // Limits that keep constrained decoding's state small.
  static constexpr int kMaxDepth = 8;
  static constexpr int kMaxProperties = 64;
  static constexpr int kMaxEnumValues = 128;

  // `where` prefixes paths in messages (e.g. "tool 'add' parameters").
  static absl::StatusOr<std::unique_ptr<CompiledSchema>> Compile(absl::string_view schema_json, absl::string_view where);

  const SchemaNode& root() const { return *root_; }

  // OK, or InvalidArgument naming the first offending path ("arguments.to: ...").
  absl::Status Validate(const nlohmann::json& value, absl::string_view root_name = "arguments") const;

 private:
  std::unique_ptr<SchemaNode> root_;
};

// Code points of a UTF-8 string (nlohmann keeps strings as UTF-8 bytes).
int Utf8Length(absl::string_view s);

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_JSON_SCHEMA_H_
