// The example tools of examples/tools (calculator, convert_units, current_time, lookup):
// their pure functions against independently known values, their handlers' argument
// checking, their schemas against ToolRegistry, and the structure of the tool-calling
// question suite in tests/data/tool_suite.jsonl.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "examples/tools/calculator.h"
#include "examples/tools/current_time.h"
#include "examples/tools/lookup_table.h"
#include "examples/tools/unit_converter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/tools.h"
#include "nlohmann/json.hpp"
#include "tests/support/status_matchers.h"

namespace hetero::example_tools {
namespace {

using ::hetero::testing::IsOk;
using ::hetero::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// ---- calculator ---------------------------------------------------------------------------

std::string CalculateOrError(const std::string& expression) {
  const absl::StatusOr<std::string> result = Calculate(expression);
  return result.ok() ? *result : "error: " + std::string(result.status().message());
}

TEST(CalculatorTest, DecimalsAreExact) {
  EXPECT_EQ(CalculateOrError("0.1+0.2"), "0.3");
  EXPECT_EQ(CalculateOrError("0.1 + 0.2 - 0.3"), "0");
  EXPECT_EQ(CalculateOrError("12.50"), "12.5");
  EXPECT_EQ(CalculateOrError(".5 + .5"), "1");
  EXPECT_EQ(CalculateOrError("5."), "5");
  EXPECT_EQ(CalculateOrError("10/4"), "2.5");
  EXPECT_EQ(CalculateOrError("1/3*3"), "1");
  EXPECT_EQ(CalculateOrError("1/1024"), "0.0009765625");
  EXPECT_EQ(CalculateOrError("  1 +\t2 "), "3");
}

TEST(CalculatorTest, LargeExactResults) {
  EXPECT_EQ(CalculateOrError("123456789*987654321"), "121932631112635269");
  EXPECT_EQ(CalculateOrError("2^100"), "1267650600228229401496703205376");
  EXPECT_EQ(CalculateOrError("2^126"), "85070591730234615865843651857942052864");
  // 2^-64 has 64 decimal places, all exact.
  EXPECT_EQ(CalculateOrError("2^-64"),
            "0.0000000000000000000542101086242752217003726400434970855712890625");
}

TEST(CalculatorTest, InexactResultsAreRoundedTo12SignificantDigits) {
  EXPECT_EQ(CalculateOrError("1/3"), "≈ 0.333333333333");
  EXPECT_EQ(CalculateOrError("2/3"), "≈ 0.666666666667");
  EXPECT_EQ(CalculateOrError("-1/7"), "≈ -0.142857142857");
  EXPECT_EQ(CalculateOrError("100000000000000000000/3"), "≈ 3.33333333333e+19");
}

TEST(CalculatorTest, PrecedenceAndAssociativity) {
  EXPECT_EQ(CalculateOrError("2+3*4"), "14");
  EXPECT_EQ(CalculateOrError("(2+3)*4"), "20");
  EXPECT_EQ(CalculateOrError("10-4-3"), "3");
  EXPECT_EQ(CalculateOrError("100/10/5"), "2");
  EXPECT_EQ(CalculateOrError("2^3^2"), "512");  // 2^(3^2), not (2^3)^2 = 64
  EXPECT_EQ(CalculateOrError("2*3^2"), "18");
  EXPECT_EQ(CalculateOrError("(3 + 4) * (5 - 2) / 7"), "3");
}

TEST(CalculatorTest, PowersAndSigns) {
  EXPECT_EQ(CalculateOrError("2^10"), "1024");
  EXPECT_EQ(CalculateOrError("2**10"), "1024");
  EXPECT_EQ(CalculateOrError("2^-2"), "0.25");
  EXPECT_EQ(CalculateOrError("(-2)^-3"), "-0.125");
  EXPECT_EQ(CalculateOrError("(2/3)^2"), "≈ 0.444444444444");
  EXPECT_EQ(CalculateOrError("0^0"), "1");
  EXPECT_EQ(CalculateOrError("1^100000000000000000000"), "1");
  EXPECT_EQ(CalculateOrError("(-1)^100000000000000000001"), "-1");
  EXPECT_EQ(CalculateOrError("-4"), "-4");
  EXPECT_EQ(CalculateOrError("-2^2"), "-4");  // the sign applies to the power
  EXPECT_EQ(CalculateOrError("(-2)^2"), "4");
  EXPECT_EQ(CalculateOrError("--3"), "3");
  EXPECT_EQ(CalculateOrError("+5"), "5");
  EXPECT_EQ(CalculateOrError("2*-3"), "-6");
  EXPECT_EQ(CalculateOrError("2^(6/3)"), "4");  // a whole exponent written as a fraction
}

TEST(CalculatorTest, UnicodeOperatorSigns) {
  EXPECT_EQ(CalculateOrError("6×7"), "42");
  EXPECT_EQ(CalculateOrError("84 ÷ 2"), "42");
  EXPECT_EQ(CalculateOrError("10 − 3"), "7");
  EXPECT_EQ(CalculateOrError("−2 × 1.5"), "-3");
}

TEST(CalculatorTest, EvaluateGivesReducedFractions) {
  const absl::StatusOr<ExactRational> half = EvaluateExpression("1/3 + 1/6");
  ASSERT_THAT(half, IsOk());
  EXPECT_EQ(half->numerator(), 1);
  EXPECT_EQ(half->denominator(), 2);
  const absl::StatusOr<ExactRational> negative = ExactRational::Create(6, -8);
  ASSERT_THAT(negative, IsOk());
  EXPECT_EQ(negative->numerator(), -3);
  EXPECT_EQ(negative->denominator(), 4);
  EXPECT_THAT(ExactRational::Create(1, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Int128ToString(-(Int128{1} << 100)), "-1267650600228229401496703205376");
}

TEST(CalculatorTest, SyntaxErrorsNameThePosition) {
  EXPECT_THAT(Calculate(""), StatusIs(absl::StatusCode::kInvalidArgument, "empty expression"));
  EXPECT_THAT(Calculate("   "), StatusIs(absl::StatusCode::kInvalidArgument, "empty expression"));
  EXPECT_THAT(Calculate("(1+2)*)"), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("unexpected ')' at position 7")));
  EXPECT_THAT(Calculate("(1+2))"), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("unexpected ')' at position 6")));
  EXPECT_THAT(Calculate("1+"), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("unexpected end of expression at position 3")));
  EXPECT_THAT(Calculate("1 2"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("unexpected '2' at position 3")));
  EXPECT_THAT(Calculate("3 + 4 abc"), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("unexpected 'a' at position 7")));
  EXPECT_THAT(Calculate("1e3"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("unexpected 'e' at position 2")));
  EXPECT_THAT(Calculate("((1+2)"), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("missing ')' for the '(' at position 1")));
  EXPECT_THAT(Calculate("*2"), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("unexpected '*' at position 1")));
  EXPECT_THAT(Calculate("."), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("unexpected '.' at position 1")));
  // Positions count characters, not bytes: × is two bytes.
  EXPECT_THAT(Calculate("2×)"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("unexpected ')' at position 3")));
  EXPECT_THAT(Calculate("1 + \xff"), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("invalid UTF-8 at position 5")));
  // Hints for what models commonly write.
  EXPECT_THAT(Calculate("15% * 80"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("15/100*80")));
  EXPECT_THAT(Calculate("1,000 + 1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("thousands separators")));
}

TEST(CalculatorTest, ArithmeticErrors) {
  EXPECT_THAT(Calculate("1/0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("division by zero"), HasSubstr("position 2"))));
  EXPECT_THAT(Calculate("5 / (2 - 2)"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("division by zero")));
  EXPECT_THAT(Calculate("0^-1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("division by zero")));
  EXPECT_THAT(Calculate("2^0.5"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("must be a whole number, not 0.5")));
  EXPECT_THAT(Calculate("2^1000"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("number too large")));
  EXPECT_THAT(Calculate("2^127"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("number too large")));
  EXPECT_THAT(Calculate("2^-200"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("number too large")));
  EXPECT_THAT(Calculate("10^30 * 10^30"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("number too large")));
  EXPECT_THAT(Calculate("10^30 + 1/10^30"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("number too large")));
  EXPECT_THAT(Calculate(std::string(45, '9')),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("number too large")));
}

TEST(CalculatorTest, NestingAndLengthAreLimited) {
  const auto nested = [](int depth) {
    return std::string(depth, '(') + "1" + std::string(depth, ')');
  };
  EXPECT_EQ(CalculateOrError(nested(kMaxExpressionNesting)), "1");
  EXPECT_THAT(Calculate(nested(kMaxExpressionNesting + 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
  EXPECT_THAT(Calculate(std::string(100, '-') + "1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
  std::string powers = "1";
  for (int i = 0; i < 80; ++i) powers += "^1";
  EXPECT_THAT(Calculate(powers),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));

  std::string longest = "1";
  while (longest.size() + 2 <= static_cast<size_t>(kMaxExpressionCharacters)) longest += "+1";
  EXPECT_EQ(CalculateOrError(longest), std::to_string((longest.size() + 1) / 2));
  EXPECT_THAT(Calculate(longest + "+1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expression too long")));
}

TEST(CalculatorTest, HandlerReadsJsonArguments) {
  const Tool tool = MakeCalculatorTool();
  EXPECT_EQ(tool.name, "calculator");
  EXPECT_EQ(*tool.handler(R"({"expression": "0.1 + 0.2"})"), "0.3");
  EXPECT_THAT(tool.handler("not json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
  EXPECT_THAT(tool.handler(R"(["1+1"])"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be a JSON object")));
  EXPECT_THAT(tool.handler("{}"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("missing argument 'expression'")));
  EXPECT_THAT(tool.handler(R"({"expression": 5})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'expression' must be a string, not a number")));
  EXPECT_THAT(tool.handler(R"({"expression": "1/0"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("division by zero")));
}

// ---- convert_units ------------------------------------------------------------------------

double ConvertOrNan(double value, const std::string& from, const std::string& to) {
  const absl::StatusOr<double> result = ConvertUnits(value, from, to);
  return result.ok() ? *result : std::nan("");
}

// Expected values from the unit definitions (1 in = 2.54 cm, 1 lb = 0.45359237 kg, 1 gal =
// 231 in^3, F = C * 9/5 + 32, K = C + 273.15), not from the tool's own table. Tolerance:
// 1e-12 relative for scale factors, 1e-9 absolute for temperatures.
TEST(UnitConverterTest, ScaleFactorsMatchDefinitions) {
  const auto near = [](double expected) { return std::fabs(expected) * 1e-12; };
  EXPECT_NEAR(ConvertOrNan(1, "mi", "m"), 1609.344, near(1609.344));
  EXPECT_NEAR(ConvertOrNan(1, "mi", "yd"), 1760, near(1760));
  EXPECT_NEAR(ConvertOrNan(1, "yd", "ft"), 3, near(3));
  EXPECT_NEAR(ConvertOrNan(1, "ft", "in"), 12, near(12));
  EXPECT_NEAR(ConvertOrNan(1, "in", "mm"), 25.4, near(25.4));
  EXPECT_NEAR(ConvertOrNan(1, "km", "cm"), 100000, near(100000));
  EXPECT_NEAR(ConvertOrNan(1, "lb", "g"), 453.59237, near(453.59237));
  EXPECT_NEAR(ConvertOrNan(16, "oz", "lb"), 1, near(1));
  EXPECT_NEAR(ConvertOrNan(1, "kg", "mg"), 1e6, near(1e6));
  // 231 cubic inches of 16.387064 ml each.
  EXPECT_NEAR(ConvertOrNan(1, "gal", "ml"), 231 * 16.387064, near(3785.411784));
  EXPECT_NEAR(ConvertOrNan(4, "qt", "gal"), 1, near(1));
  EXPECT_NEAR(ConvertOrNan(16, "cup", "gal"), 1, near(1));
  EXPECT_NEAR(ConvertOrNan(1, "day", "min"), 1440, near(1440));
  EXPECT_NEAR(ConvertOrNan(2.5, "h", "s"), 9000, near(9000));
  EXPECT_NEAR(ConvertOrNan(1, "m", "m"), 1, 0);
}

TEST(UnitConverterTest, TemperaturesAreAffine) {
  EXPECT_NEAR(ConvertOrNan(100, "C", "F"), 212, 1e-9);
  EXPECT_NEAR(ConvertOrNan(212, "F", "C"), 100, 1e-9);
  EXPECT_NEAR(ConvertOrNan(0, "K", "C"), -273.15, 1e-9);
  EXPECT_NEAR(ConvertOrNan(0, "K", "F"), -459.67, 1e-9);
  EXPECT_NEAR(ConvertOrNan(32, "F", "K"), 273.15, 1e-9);
  EXPECT_NEAR(ConvertOrNan(-40, "C", "F"), -40, 1e-9);
  EXPECT_NEAR(ConvertOrNan(-459.67, "F", "K"), 0, 1e-9);
  EXPECT_NEAR(ConvertOrNan(37, "C", "K"), 310.15, 1e-9);
}

TEST(UnitConverterTest, DescribesWithSixSignificantDigits) {
  EXPECT_EQ(*DescribeConversion(5, "km", "mi"), "5 km = 3.10686 mi");
  EXPECT_EQ(*DescribeConversion(100, "C", "F"), "100 C = 212 F");
  EXPECT_EQ(*DescribeConversion(26.2, "mi", "km"), "26.2 mi = 42.1648 km");
  EXPECT_EQ(*DescribeConversion(1, "mi", "mm"), "1 mi = 1609344 mm");
  EXPECT_EQ(*DescribeConversion(30, "min", "h"), "30 min = 0.5 h");
  EXPECT_EQ(FormatConvertedValue(-0.0), "0");
  EXPECT_EQ(FormatConvertedValue(1e-7), "1e-07");
  EXPECT_EQ(FormatConvertedValue(2e15), "2e+15");
}

TEST(UnitConverterTest, Errors) {
  EXPECT_THAT(ConvertUnits(5, "km", "kg"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot convert km (length) to kg (mass)")));
  EXPECT_THAT(ConvertUnits(1, "h", "C"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("h (time) to C")));
  EXPECT_THAT(ConvertUnits(1, "parsec", "m"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("unknown unit 'parsec'"), HasSubstr("mi yd ft in"))));
  EXPECT_THAT(ConvertUnits(1, "m", "KM"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown unit 'KM'")));
  EXPECT_THAT(ConvertUnits(-300, "C", "K"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("below absolute zero")));
  EXPECT_THAT(ConvertUnits(INFINITY, "m", "km"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  EXPECT_THAT(ConvertUnits(1e308, "mi", "mm"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")));
}

TEST(UnitConverterTest, HandlerReadsJsonArguments) {
  const Tool tool = MakeUnitConversionTool();
  EXPECT_EQ(tool.name, "convert_units");
  EXPECT_EQ(*tool.handler(R"({"value": 3, "from": "m", "to": "ft"})"), "3 m = 9.84252 ft");
  EXPECT_THAT(tool.handler(R"({"value": "3", "from": "m", "to": "ft"})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'value' must be a number, not a string")));
  EXPECT_THAT(tool.handler(R"({"value": 3, "from": "m"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing argument 'to'")));
  EXPECT_THAT(tool.handler("3"), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("must be a JSON object, not a number")));
  const nlohmann::json schema = nlohmann::json::parse(tool.parameters_json);
  EXPECT_EQ(schema["properties"]["from"]["enum"].size(), SupportedUnits().size());
  EXPECT_EQ(SupportedUnits().size(), 25u);
}

// ---- current_time -------------------------------------------------------------------------

std::chrono::system_clock::time_point At(std::chrono::year_month_day date, int hours, int minutes,
                                         int seconds) {
  return std::chrono::sys_days(date) + std::chrono::hours(hours) + std::chrono::minutes(minutes) +
         std::chrono::seconds(seconds);
}

TEST(CurrentTimeTest, FormatsAtOffsets) {
  using std::chrono::year;
  const auto now = At(year(2026) / 11 / 29, 19, 4, 5);
  EXPECT_EQ(FormatIso8601(now, 0), "2026-11-29T19:04:05+00:00");
  EXPECT_EQ(FormatIso8601(now, 120), "2026-11-29T21:04:05+02:00");
  EXPECT_EQ(FormatIso8601(now, -330), "2026-11-29T13:34:05-05:30");
  EXPECT_EQ(FormatIso8601(now, 300), "2026-11-30T00:04:05+05:00");  // the next day
  EXPECT_EQ(FormatIso8601(now + std::chrono::milliseconds(999), 0), "2026-11-29T19:04:05+00:00");
  EXPECT_EQ(FormatIso8601(At(year(2024) / 2 / 28, 23, 0, 0), 60), "2024-02-29T00:00:00+01:00");
  EXPECT_EQ(FormatIso8601(At(year(1970) / 1 / 1, 0, 0, -1), 0), "1969-12-31T23:59:59+00:00");
}

TEST(CurrentTimeTest, ParsesOffsets) {
  EXPECT_EQ(*ParseUtcOffset("+02:00"), 120);
  EXPECT_EQ(*ParseUtcOffset("-05:30"), -330);
  EXPECT_EQ(*ParseUtcOffset("+14:00"), 840);
  EXPECT_EQ(*ParseUtcOffset("-00:00"), 0);
  EXPECT_EQ(*ParseUtcOffset("Z"), 0);
  for (const char* bad : {"+2", "02:00", "+0200", "+02:0", "UTC+2", "", "+02:00 ", "+ab:cd"}) {
    EXPECT_THAT(ParseUtcOffset(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("+HH:MM")))
        << bad;
  }
  for (const char* bad : {"+15:00", "+14:30", "+02:60", "-99:00"}) {
    EXPECT_THAT(ParseUtcOffset(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out of range")))
        << bad;
  }
}

TEST(CurrentTimeTest, HandlerUsesTheInjectedClock) {
  using std::chrono::year;
  // The suite runner's fixed time.
  const Tool tool = MakeCurrentTimeTool([] { return At(year(2026) / 11 / 29, 12, 0, 0); });
  EXPECT_EQ(tool.name, "current_time");
  EXPECT_EQ(*tool.handler("{}"), "2026-11-29T12:00:00+00:00");
  EXPECT_EQ(*tool.handler(R"({"utc_offset": null})"), "2026-11-29T12:00:00+00:00");
  EXPECT_EQ(*tool.handler(R"({"utc_offset": "+09:00"})"), "2026-11-29T21:00:00+09:00");
  EXPECT_EQ(*tool.handler(R"({"utc_offset": "-05:00"})"), "2026-11-29T07:00:00-05:00");
  EXPECT_THAT(tool.handler(R"({"utc_offset": 2})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be a string")));
  EXPECT_THAT(tool.handler(R"({"utc_offset": "+2"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("+HH:MM")));
  EXPECT_THAT(tool.handler("null"), StatusIs(absl::StatusCode::kInvalidArgument));

  // The default clock is the system's.
  const Tool system = MakeCurrentTimeTool();
  const absl::StatusOr<std::string> now = system.handler("{}");
  ASSERT_THAT(now, IsOk());
  EXPECT_EQ(now->size(), std::string("2026-11-29T12:00:00+00:00").size());
}

// ---- lookup -------------------------------------------------------------------------------

class LookupTest : public ::testing::Test {
 protected:
  // Writes `contents` to a file of the test's own and returns its path.
  std::string WriteFile(const std::string& contents) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string path = ::testing::TempDir() + "example_tools_" + info->name() + "_" +
                             std::to_string(files_++) + ".json";
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  LookupTable LoadOrDie(const std::string& contents) {
    absl::StatusOr<LookupTable> table = LookupTable::LoadFile(WriteFile(contents));
    EXPECT_THAT(table, IsOk());
    return table.ok() ? *std::move(table) : LookupTable();
  }

  static constexpr const char* kFacts = R"({
    "Capital of Australia": "Canberra",
    "capital of austria": "Vienna",
    "height of mount everest": "8849 m",
    "boiling point of ethanol": 78.37,
    "population of tokyo": 14047594,
    "year the eiffel tower was completed": 1889
  })";
  int files_ = 0;
};

TEST_F(LookupTest, FindsIgnoringCaseAndSpaces) {
  const LookupTable table = LoadOrDie(kFacts);
  EXPECT_EQ(table.size(), 6u);
  EXPECT_EQ(*table.Find("capital of australia"), "Canberra");
  EXPECT_EQ(*table.Find("  CAPITAL   of\tAustralia "), "Canberra");
  EXPECT_EQ(*table.Find("height of Mount Everest"), "8849 m");
  EXPECT_EQ(*table.Find("boiling point of ethanol"), "78.37");
  EXPECT_EQ(*table.Find("population of tokyo"), "14047594");
  EXPECT_EQ(NormalizeLookupKey("  A  b\n C "), "a b c");
  EXPECT_THAT(table.Find("   "), StatusIs(absl::StatusCode::kInvalidArgument, "the key is empty"));
  EXPECT_THAT(table.Find(std::string(kMaxLookupKeyCharacters + 1, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too long")));
}

TEST_F(LookupTest, UnknownKeysSuggestCloseOnes) {
  const LookupTable table = LoadOrDie(kFacts);
  // A typo: within edit distance.
  EXPECT_THAT(
      table.Find("Capital of Austrailia"),
      StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("no entry for 'capital of austrailia'"),
                                                  HasSubstr("'capital of australia'"))));
  // Part of a key.
  EXPECT_THAT(table.Find("mount everest"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'height of mount everest'")));
  // The same words in another order.
  EXPECT_THAT(
      table.Find("eiffel tower completion"),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("'year the eiffel tower was completed'")));
  // Nothing alike: no suggestions.
  EXPECT_THAT(table.Find("zzz"), StatusIs(absl::StatusCode::kNotFound, "no entry for 'zzz'"));
  EXPECT_THAT(table.ClosestKeys("capital of austrlia", 5).front(), "capital of australia");
}

TEST_F(LookupTest, SuggestsAtMostFiveKeys) {
  nlohmann::json many = nlohmann::json::object();
  for (int i = 0; i < 9; ++i) many["capital of country " + std::to_string(i)] = "x";
  const LookupTable table = LoadOrDie(many.dump());
  const absl::StatusOr<std::string> missing = table.Find("capital of country");
  ASSERT_THAT(missing, StatusIs(absl::StatusCode::kNotFound));
  const std::string message(missing.status().message());
  size_t quoted = 0;
  for (const char c : message) quoted += c == '\'';
  EXPECT_EQ(quoted, 2 * (1 + kMaxLookupSuggestions)) << message;
}

TEST_F(LookupTest, BadFiles) {
  EXPECT_THAT(LookupTable::LoadFile(::testing::TempDir() + "no_such_facts_file.json"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot open lookup file")));
  EXPECT_THAT(LookupTable::LoadFile(WriteFile("{\"a\": ")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
  EXPECT_THAT(LookupTable::LoadFile(WriteFile(R"(["a", "b"])")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must hold one JSON object of key -> string or number, not "
                                 "an array")));
  for (const char* value : {"true", "null", "[1]", "{\"b\": 1}"}) {
    EXPECT_THAT(LookupTable::LoadFile(WriteFile(std::string("{\"a\": ") + value + "}")),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("the value of 'a' must be a string or a number")))
        << value;
  }
  EXPECT_THAT(LookupTable::LoadFile(WriteFile(R"({"Key": "1", "key ": "2"})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate key")));
  EXPECT_THAT(LookupTable::LoadFile(WriteFile(R"({" ": "1"})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a key is empty")));
  EXPECT_THAT(MakeLookupTool(::testing::TempDir() + "no_such_facts_file.json"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(LookupTest, HandlerReadsJsonArguments) {
  const absl::StatusOr<Tool> tool = MakeLookupTool(WriteFile(kFacts));
  ASSERT_THAT(tool, IsOk());
  EXPECT_EQ(tool->name, "lookup");
  EXPECT_EQ(*tool->handler(R"({"key": "Capital of Austria"})"), "Vienna");
  EXPECT_THAT(tool->handler(R"({"key": "capital of peru"})"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no entry for 'capital of peru'")));
  EXPECT_THAT(tool->handler(R"({"key": ["a"]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'key' must be a string, not an array")));
  EXPECT_THAT(tool->handler(R"({"name": "a"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing argument 'key'")));
  // A copied tool shares the table.
  const Tool copy = *tool;
  EXPECT_EQ(*copy.handler(R"({"key": "capital of australia"})"), "Canberra");
  const absl::StatusOr<Tool> described = MakeLookupTool(WriteFile(kFacts), "World facts");
  ASSERT_THAT(described, IsOk());
  EXPECT_EQ(described->description, "World facts");
}

// ---- all tools ----------------------------------------------------------------------------

// The schemas use only keywords the registry accepts, and it agrees with the handlers on
// what valid arguments look like.
TEST(ExampleToolsTest, RegisterWithToolRegistry) {
  const std::string facts = std::string(HETERO_TEST_DATA_DIR) + "/tool_suite_facts.json";
  absl::StatusOr<Tool> lookup = MakeLookupTool(facts);
  ASSERT_THAT(lookup, IsOk());
  ToolRegistry registry;
  ASSERT_THAT(registry.Register(MakeCalculatorTool()), IsOk());
  ASSERT_THAT(registry.Register(MakeUnitConversionTool()), IsOk());
  ASSERT_THAT(registry.Register(MakeCurrentTimeTool()), IsOk());
  ASSERT_THAT(registry.Register(*std::move(lookup)), IsOk());
  EXPECT_EQ(registry.size(), 4u);
  EXPECT_THAT(registry.ValidateArguments("calculator", R"({"expression": "1+1"})"), IsOk());
  EXPECT_THAT(registry.ValidateArguments("calculator", "{}"), Not(IsOk()));
  EXPECT_THAT(
      registry.ValidateArguments("convert_units", R"({"value": 1, "from": "m", "to": "ft"})"),
      IsOk());
  EXPECT_THAT(
      registry.ValidateArguments("convert_units", R"({"value": 1, "from": "parsec", "to": "m"})"),
      Not(IsOk()));
  EXPECT_THAT(registry.ValidateArguments("current_time", "{}"), IsOk());
  EXPECT_THAT(registry.ValidateArguments("lookup", R"({"key": "capital of peru"})"), IsOk());
  EXPECT_THAT(registry.ValidateArguments("lookup", R"({"key": ""})"), Not(IsOk()));
}

// ---- the question suite -------------------------------------------------------------------

// A fact value "contains" an answer when, for a text answer, it contains it ignoring case,
// or, for a number, it is that number or a string starting with it ("8849 m").
bool FactMatches(const nlohmann::json& value, const std::string& answer, bool numeric) {
  if (!numeric) {
    return value.is_string() && absl::StrContains(absl::AsciiStrToLower(value.get<std::string>()),
                                                  absl::AsciiStrToLower(answer));
  }
  double expected = 0, actual = 0;
  if (!absl::SimpleAtod(answer, &expected)) return false;
  if (value.is_number()) {
    actual = value.get<double>();
  } else {
    const std::string text = value.get<std::string>();
    if (!absl::SimpleAtod(text.substr(0, text.find(' ')), &actual)) return false;
  }
  return std::fabs(actual - expected) <= 1e-9 * std::max(1.0, std::fabs(expected));
}

TEST(ToolSuiteFileTest, EntriesAreWellFormed) {
  const std::string dir = HETERO_TEST_DATA_DIR;
  std::ifstream facts_file(dir + "/tool_suite_facts.json");
  ASSERT_TRUE(facts_file.good());
  const nlohmann::json facts = nlohmann::json::parse(facts_file, nullptr, false);
  ASSERT_TRUE(facts.is_object());
  // The suite's facts load as a lookup table too.
  ASSERT_THAT(LookupTable::LoadFile(dir + "/tool_suite_facts.json"), IsOk());

  std::ifstream suite(dir + "/tool_suite.jsonl");
  ASSERT_TRUE(suite.good());
  const std::set<std::string> tools = {"calculator", "convert_units", "lookup", "current_time"};
  std::set<std::string> ids;
  std::map<std::string, int> per_tool;
  std::string line;
  int line_number = 0;
  while (std::getline(suite, line)) {
    ++line_number;
    SCOPED_TRACE("tool_suite.jsonl line " + std::to_string(line_number));
    const nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(entry.is_object());
    for (const char* field : {"id", "question", "tool", "answer", "check"}) {
      ASSERT_TRUE(entry.contains(field) && entry[field].is_string()) << field;
    }
    EXPECT_EQ(entry.size(), 5u);
    const std::string id = entry["id"];
    const std::string tool = entry["tool"];
    const std::string answer = entry["answer"];
    const std::string check = entry["check"];
    EXPECT_TRUE(ids.insert(id).second) << "duplicate id " << id;
    EXPECT_FALSE(entry["question"].get<std::string>().empty());
    EXPECT_FALSE(answer.empty());
    EXPECT_TRUE(tools.count(tool)) << tool;
    ++per_tool[tool];
    EXPECT_TRUE(check == "number" || check == "text") << check;
    double number;
    if (check == "number") {
      EXPECT_TRUE(absl::SimpleAtod(answer, &number)) << answer;
    }
    if (tool == "current_time") {
      EXPECT_EQ(answer, "2026-11-29");
    }
    if (tool == "lookup") {
      bool found = false;
      for (const auto& [key, value] : facts.items()) {
        found |= FactMatches(value, answer, check == "number");
      }
      EXPECT_TRUE(found) << id << ": '" << answer << "' is not in tool_suite_facts.json";
    }
  }
  EXPECT_GE(line_number, 48);
  EXPECT_EQ(ids.size(), static_cast<size_t>(line_number));
  EXPECT_GE(per_tool["calculator"], 14);
  EXPECT_GE(per_tool["convert_units"], 12);
  EXPECT_GE(per_tool["lookup"], 12);
  EXPECT_EQ(per_tool["current_time"], 2);
}

}  // namespace
}  // namespace hetero::example_tools
