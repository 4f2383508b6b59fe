// Fuzzes the JSON-schema compiler and the argument validator. The input is
// "SCHEMA\0VALUE". Properties checked on every input:
//  - registration and validation never crash, whatever the schema or value;
//  - validation is a property of the value, not of its spelling: VALUE and its canonical
//    re-serialization (nlohmann's dump) are accepted or refused alike;
//  - a refusal names a path ("$..." or the arguments' parse error), never an empty message;
//  - the constrained-decoding matcher built from the schema accepts nothing the validator
//    refuses (any VALUE it reads as complete also validates).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hetero/tools.h"
#include "nlohmann/json.hpp"
#include "src/runtime/tools/json_matcher.h"
#include "src/runtime/tools/json_schema.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "json_schema_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

// nlohmann reads 1e400 as infinity and writes it back as null: such a value has no
// canonical spelling to compare with.
bool AllNumbersFinite(const nlohmann::json& j) {
  if (j.is_number_float()) return std::isfinite(j.get<double>());
  if (j.is_structured()) {
    for (const auto& item : j) {
      if (!AllNumbersFinite(item)) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string schema(input.substr(0, nul));
  const std::string value(nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1));

  hetero::ToolRegistry registry;
  hetero::Tool tool;
  tool.name = "fuzz";
  tool.description = "fuzzed schema";
  tool.parameters_json = schema;
  tool.handler = [](const std::string& a) -> absl::StatusOr<std::string> { return a; };
  const absl::Status registered = registry.Register(std::move(tool));
  if (!registered.ok()) {
    Check(!registered.message().empty(), "a refused schema says why");
    return 0;
  }

  const absl::Status verdict = registry.ValidateArguments("fuzz", value);
  if (!verdict.ok()) Check(!verdict.message().empty(), "a refused value says why");
  const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
  if (!parsed.is_discarded() && AllNumbersFinite(parsed)) {
    const std::string canonical = parsed.dump();
    const absl::Status again = registry.ValidateArguments("fuzz", canonical);
    Check(again.ok() == verdict.ok(), "validation does not depend on the value's spelling");
  }

  const std::unique_ptr<hetero::internal::Grammar> grammar =
      hetero::internal::Grammar::ForSchema(registry.schema(0).root());
  hetero::internal::JsonMatcher matcher(grammar->root());
  for (char c : value) {
    if (!matcher.Feed(static_cast<uint8_t>(c))) return 0;
  }
  if (matcher.done()) Check(verdict.ok(), "what the matcher completes validates");
  return 0;
}
