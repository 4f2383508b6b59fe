// The `convert_units` tool: converts a value between units of length, mass, temperature,
// volume (US customary) and time, using the exact definitions of each unit (1 in =
// 2.54 cm, 1 lb = 0.45359237 kg, 1 gal = 3.785411784 l, 0 C = 273.15 K, ...).
#ifndef HETERO_EXAMPLES_TOOLS_UNIT_CONVERTER_H_
#define HETERO_EXAMPLES_TOOLS_UNIT_CONVERTER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/tools.h"

namespace hetero::example_tools {

// The unit symbols, grouped by dimension: m km cm mm mi yd ft in, kg g mg lb oz, C F K,
// l ml gal qt cup, s min h day.
std::vector<std::string> SupportedUnits();

// `value` in unit `from` expressed in unit `to`. InvalidArgument for an unknown unit (the
// message lists the supported ones), units of different dimensions (naming both), a
// temperature below absolute zero, or a non-finite value or result.
absl::StatusOr<double> ConvertUnits(double value, std::string_view from, std::string_view to);

// The tool's text: "5 km = 3.10686 mi".
absl::StatusOr<std::string> DescribeConversion(double value, std::string_view from,
                                               std::string_view to);

// A value to 6 significant digits without trailing zeros ("3.10686", "2.5", "-40"), except
// that values from one million to 1e15 are shown as whole numbers ("1609344") rather than
// in exponent notation, which would hide digits a reader expects.
std::string FormatConvertedValue(double value);

// Arguments: {"value": number, "from": unit, "to": unit}.
Tool MakeUnitConversionTool();

}  // namespace hetero::example_tools

#endif  // HETERO_EXAMPLES_TOOLS_UNIT_CONVERTER_H_
