#include "examples/tools/current_time.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "examples/tools/tool_arguments.h"

namespace hetero::example_tools {
namespace {

constexpr int kMaxOffsetHours = 14;  // Kiribati, the easternmost zone

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

absl::StatusOr<int> ParseUtcOffset(std::string_view offset) {
  if (offset == "Z") return 0;
  const bool well_formed = offset.size() == 6 && (offset[0] == '+' || offset[0] == '-') &&
                           IsDigit(offset[1]) && IsDigit(offset[2]) && offset[3] == ':' &&
                           IsDigit(offset[4]) && IsDigit(offset[5]);
  if (!well_formed) {
    return absl::InvalidArgumentError(
        absl::StrCat("utc_offset '", std::string(offset),
                     "' is not of the form +HH:MM or -HH:MM, e.g. +02:00 or -05:30"));
  }
  const int hours = (offset[1] - '0') * 10 + (offset[2] - '0');
  const int minutes = (offset[4] - '0') * 10 + (offset[5] - '0');
  if (hours > kMaxOffsetHours || minutes > 59 || (hours == kMaxOffsetHours && minutes != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("utc_offset '", std::string(offset), "' is out of range (-14:00 to +14:00)"));
  }
  const int total = hours * 60 + minutes;
  return offset[0] == '-' ? -total : total;
}

std::string FormatIso8601(std::chrono::system_clock::time_point time, int offset_minutes) {
  using namespace std::chrono;
  const auto local = floor<seconds>(time) + minutes(offset_minutes);
  const auto day = floor<days>(local);
  const year_month_day date(day);
  const hh_mm_ss<seconds> clock_time(local - day);
  const int offset_magnitude = std::abs(offset_minutes);
  char text[64];
  std::snprintf(text, sizeof(text), "%04d-%02u-%02uT%02d:%02d:%02d%c%02d:%02d",
                static_cast<int>(date.year()), static_cast<unsigned>(date.month()),
                static_cast<unsigned>(date.day()), static_cast<int>(clock_time.hours().count()),
                static_cast<int>(clock_time.minutes().count()),
                static_cast<int>(clock_time.seconds().count()), offset_minutes < 0 ? '-' : '+',
                offset_magnitude / 60, offset_magnitude % 60);
  return text;
}

Tool MakeCurrentTimeTool(Clock clock) {
  Tool tool;
  tool.name = "current_time";
  tool.description =
      "Returns the current date and time in ISO 8601 form, e.g. 2024-03-05T09:30:00+01:00. "
      "Without utc_offset the time is UTC.";
  tool.parameters_json = R"({
  "type": "object",
  "properties": {
    "utc_offset": {
      "type": "string",
      "minLength": 1,
      "maxLength": 6,
      "description": "Offset from UTC as +HH:MM or -HH:MM, e.g. +09:00 for Tokyo"
    }
  }
})";
  tool.handler =
      [clock = std::move(clock)](const std::string& arguments_json) -> absl::StatusOr<std::string> {
    return RunWithoutExceptions("current_time", [&]() -> absl::StatusOr<std::string> {
      const absl::StatusOr<nlohmann::json> arguments = ParseArgumentsObject(arguments_json);
      if (!arguments.ok()) return arguments.status();
      const absl::StatusOr<std::optional<std::string>> offset_text =
          OptionalString(*arguments, "utc_offset");
      if (!offset_text.ok()) return offset_text.status();
      int offset_minutes = 0;
      if (offset_text->has_value()) {
        const absl::StatusOr<int> offset = ParseUtcOffset(**offset_text);
        if (!offset.ok()) return offset.status();
        offset_minutes = *offset;
      }
      if (!clock) return absl::FailedPreconditionError("current_time has no clock");
      return FormatIso8601(clock(), offset_minutes);
    });
  };
  return tool;
}

}  // namespace hetero::example_tools
