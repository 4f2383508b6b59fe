#include <algorithm>

#include "absl/strings/str_cat.h"
#include "hetero/tools.h"
#include "src/runtime/status_macros.h"
#include "src/runtime/tools/json_schema.h"

namespace hetero {

struct ToolRegistry::Entry {
  Tool tool;
  std::unique_ptr<internal::CompiledSchema> schema;
};

ToolRegistry::ToolRegistry() = default;
ToolRegistry::~ToolRegistry() = default;
ToolRegistry::ToolRegistry(ToolRegistry&&) noexcept = default;
ToolRegistry& ToolRegistry::operator=(ToolRegistry&&) noexcept = default;

absl::Status ToolRegistry::Register(Tool tool) {
  const bool name_ok = !tool.name.empty() && tool.name.size() <= 64 &&
                       std::all_of(tool.name.begin(), tool.name.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                                c == '-';
                       });
  if (!name_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("tool name '", tool.name.substr(0, 80), "': use 1-64 characters of A-Z, a-z, 0-9, '_' and '-'"));
  }
  if (Find(tool.name) != nullptr) return absl::InvalidArgumentError(absl::StrCat("tool '", tool.name, "' is already registered"));
  if (!tool.handler) return absl::InvalidArgumentError(absl::StrCat("tool '", tool.name, "' has no handler"));
  if (tool.timeout.count() <= 0) return absl::InvalidArgumentError(absl::StrCat("tool '", tool.name, "': the timeout must be positive"));
  if (entries_.size() >= static_cast<size_t>(internal::CompiledSchema::kMaxEnumValues)) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", internal::CompiledSchema::kMaxEnumValues, " tools in one registry"));
  }
  auto entry = std::make_unique<Entry>();
  HETERO_ASSIGN_OR_RETURN(entry->schema, internal::CompiledSchema::Compile(tool.parameters_json,
                                                                           absl::StrCat("tool '", tool.name, "' parameters")));
  entry->tool = std::move(tool);
  entries_.push_back(std::move(entry));
  return absl::OkStatus();
}

const Tool* ToolRegistry::Find(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e->tool.name == name) return &e->tool;
  }
  return nullptr;
}

size_t ToolRegistry::size() const { return entries_.size(); }
const Tool& ToolRegistry::tool(size_t i) const { return entries_[i]->tool; }
const internal::CompiledSchema& ToolRegistry::schema(size_t i) const { return *entries_[i]->schema; }

std::vector<ToolDefinition> ToolRegistry::Definitions() const {
  std::vector<ToolDefinition> out;
  for (const auto& e : entries_) out.push_back({e->tool.name, e->tool.description, e->tool.parameters_json});
  return out;
}

absl::Status ToolRegistry::ValidateArguments(std::string_view name, std::string_view arguments_json) const {
  for (const auto& e : entries_) {
    if (e->tool.name != name) continue;
    const nlohmann::json args = nlohmann::json::parse(arguments_json, nullptr, /*allow_exceptions=*/false);
    if (args.is_discarded()) return absl::InvalidArgumentError("arguments: not valid JSON");
    return e->schema->Validate(args);
  }
  return absl::NotFoundError(absl::StrCat("no tool named '", std::string(name), "'"));
}

}  // namespace hetero
