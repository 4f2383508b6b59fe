#include "examples/tools/unit_converter.h"

#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "examples/tools/tool_arguments.h"
#include "nlohmann/json.hpp"

namespace hetero::example_tools {
namespace {

// A unit is an affine map to its dimension's base unit: base = (value + offset) * scale.
// Only temperatures have an offset.
struct Unit {
  std::string_view symbol;
  std::string_view dimension;
  double scale;
  double offset = 0;
};

constexpr double kPound = 0.45359237;    // kg, exact by definition
constexpr double kGallon = 3.785411784;  // l, the US liquid gallon: 231 cubic inches

constexpr Unit kUnits[] = {
    {"m", "length", 1},
    {"km", "length", 1000},
    {"cm", "length", 0.01},
    {"mm", "length", 0.001},
    {"mi", "length", 1609.344},
    {"yd", "length", 0.9144},
    {"ft", "length", 0.3048},
    {"in", "length", 0.0254},
    {"kg", "mass", 1},
    {"g", "mass", 0.001},
    {"mg", "mass", 0.000001},
    {"lb", "mass", kPound},
    {"oz", "mass", kPound / 16},
    {"C", "temperature", 1, 273.15},
    {"F", "temperature", 5.0 / 9.0, 459.67},
    {"K", "temperature", 1},
    {"l", "volume", 1},
    {"ml", "volume", 0.001},
    {"gal", "volume", kGallon},
    {"qt", "volume", kGallon / 4},
    {"cup", "volume", kGallon / 16},
    {"s", "time", 1},
    {"min", "time", 60},
    {"h", "time", 3600},
    {"day", "time", 86400},
};

absl::StatusOr<const Unit*> FindUnit(std::string_view symbol) {
  for (const Unit& unit : kUnits) {
    if (unit.symbol == symbol) return &unit;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown unit '", std::string(symbol),
                   "'; supported: ", absl::StrJoin(SupportedUnits(), " ")));
}

std::string FormatInput(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.15g", value == 0 ? 0.0 : value);
  return text;
}

}  // namespace

std::vector<std::string> SupportedUnits() {
  std::vector<std::string> symbols;
  for (const Unit& unit : kUnits) symbols.emplace_back(unit.symbol);
  return symbols;
}

absl::StatusOr<double> ConvertUnits(double value, std::string_view from, std::string_view to) {
  if (!std::isfinite(value)) return absl::InvalidArgumentError("value must be a finite number");
  const absl::StatusOr<const Unit*> source = FindUnit(from);
  if (!source.ok()) return source.status();
  const absl::StatusOr<const Unit*> target = FindUnit(to);
  if (!target.ok()) return target.status();
  if ((*source)->dimension != (*target)->dimension) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot convert ", std::string(from), " (", std::string((*source)->dimension),
                     ") to ", std::string(to), " (", std::string((*target)->dimension), ")"));
  }
  const double base = (value + (*source)->offset) * (*source)->scale;
  // A little slack, so that -459.67 F (exactly 0 K) is not refused for a rounding error.
  if ((*source)->dimension == "temperature" && base < -1e-9) {
    return absl::InvalidArgumentError(
        absl::StrCat(FormatInput(value), " ", std::string(from), " is below absolute zero"));
  }
  const double result = base / (*target)->scale - (*target)->offset;
  if (!std::isfinite(result)) return absl::InvalidArgumentError("the result is too large");
  return result;
}

std::string FormatConvertedValue(double value) {
  char text[64];
  if (std::fabs(value) >= 1e6 && std::fabs(value) < 1e15) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.6g", value);
  }
  // Rounding can leave "-0" for a tiny negative value.
  if (std::string_view(text) == "-0") return "0";
  return text;
}

absl::StatusOr<std::string> DescribeConversion(double value, std::string_view from,
                                               std::string_view to) {
  const absl::StatusOr<double> result = ConvertUnits(value, from, to);
  if (!result.ok()) return result.status();
  return absl::StrCat(FormatInput(value), " ", std::string(from), " = ",
                      FormatConvertedValue(*result), " ", std::string(to));
}

Tool MakeUnitConversionTool() {
  const nlohmann::json units = SupportedUnits();
  const nlohmann::json schema = {
      {"type", "object"},
      {"properties",
       {{"value", {{"type", "number"}, {"description", "The quantity to convert"}}},
        {"from", {{"type", "string"}, {"enum", units}, {"description", "The unit of the value"}}},
        {"to", {{"type", "string"}, {"enum", units}, {"description", "The unit wanted"}}}}},
      {"required", {"value", "from", "to"}},
  };
  Tool tool;
  tool.name = "convert_units";
  tool.description =
      "Converts a value between units of the same kind. Length: m km cm mm mi yd ft in; "
      "mass: kg g mg lb oz; temperature: C F K; volume (US): l ml gal qt cup; time: s min h "
      "day. Returns e.g. '5 km = 3.10686 mi'.";
  tool.parameters_json = schema.dump(2);
  tool.handler = [](const std::string& arguments_json) -> absl::StatusOr<std::string> {
    return RunWithoutExceptions("convert_units", [&]() -> absl::StatusOr<std::string> {
      const absl::StatusOr<nlohmann::json> arguments = ParseArgumentsObject(arguments_json);
      if (!arguments.ok()) return arguments.status();
      const absl::StatusOr<double> value = RequiredNumber(*arguments, "value");
      if (!value.ok()) return value.status();
      const absl::StatusOr<std::string> from = RequiredString(*arguments, "from");
      if (!from.ok()) return from.status();
      const absl::StatusOr<std::string> to = RequiredString(*arguments, "to");
      if (!to.ok()) return to.status();
      return DescribeConversion(*value, *from, *to);
    });
  };
  return tool;
}

}  // namespace hetero::example_tools
