// The `current_time` tool: the date and time now, at UTC or at a given UTC offset, as ISO
// 8601 text ("2026-11-29T21:04:05+02:00"). The clock is injectable so that tests and the
// tool-calling suite can fix "now".
#ifndef HETERO_EXAMPLES_TOOLS_CURRENT_TIME_H_
#define HETERO_EXAMPLES_TOOLS_CURRENT_TIME_H_

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "hetero/tools.h"

namespace hetero::example_tools {

using Clock = std::function<std::chrono::system_clock::time_point()>;

// Minutes east of UTC for "+HH:MM" / "-HH:MM" (hours 00-14, minutes 00-59; "Z" and
// "+00:00" are UTC). InvalidArgument otherwise, showing the expected form.
absl::StatusOr<int> ParseUtcOffset(std::string_view offset);

// `time` at `offset_minutes` east of UTC, to the second: "2026-11-29T21:04:05+02:00".
std::string FormatIso8601(std::chrono::system_clock::time_point time, int offset_minutes);

// Arguments: {"utc_offset": optional "+HH:MM"}; without it, UTC ("...+00:00").
Tool MakeCurrentTimeTool(Clock clock = [] { return std::chrono::system_clock::now(); });

}  // namespace hetero::example_tools

#endif  // HETERO_EXAMPLES_TOOLS_CURRENT_TIME_H_
