#include "examples/tools/exact_rational.h"

#include <cstdio>
#include <limits>

#include "absl/status/status.h"

namespace hetero::example_tools {
namespace {

// The most negative value is kept out of every result so that negation never overflows.
constexpr Int128 kMin = std::numeric_limits<Int128>::min();

absl::Status TooLarge() {
  return absl::OutOfRangeError(
      "number too large: exact results are limited to about 38 digits in numerator and "
      "denominator");
}

bool CheckedAdd(Int128 a, Int128 b, Int128* out) {
  return !__builtin_add_overflow(a, b, out) && *out != kMin;
}
bool CheckedMul(Int128 a, Int128 b, Int128* out) {
  return !__builtin_mul_overflow(a, b, out) && *out != kMin;
}

UInt128 Magnitude(Int128 value) {
  return value < 0 ? static_cast<UInt128>(-value) : static_cast<UInt128>(value);
}

Int128 Gcd(Int128 a, Int128 b) {
  UInt128 x = Magnitude(a);
  UInt128 y = Magnitude(b);
  while (y != 0) {
    const UInt128 rest = x % y;
    x = y;
    y = rest;
  }
  return static_cast<Int128>(x);
}

std::string UInt128ToString(UInt128 value) {
  if (value == 0) return "0";
  std::string digits;
  while (value != 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  }
  return digits;
}

// x^exponent for exponent >= 1, or OutOfRange. Any |x| >= 2 overflows beyond 127 steps,
// so the loop is short without needing square-and-multiply.
absl::StatusOr<Int128> IntegerPower(Int128 x, Int128 exponent) {
  if (x == 0 || x == 1) return x;
  if (x == -1) return (exponent % 2 == 0) ? Int128{1} : Int128{-1};
  if (exponent > 127) return TooLarge();
  Int128 result = 1;
  for (Int128 i = 0; i < exponent; ++i) {
    if (!CheckedMul(result, x, &result)) return TooLarge();
  }
  return result;
}

// True when 1/denominator has a finite decimal expansion.
bool HasOnlyFactorsTwoAndFive(Int128 denominator) {
  while (denominator % 2 == 0) denominator /= 2;
  while (denominator % 5 == 0) denominator /= 5;
  return denominator == 1;
}

}  // namespace

ExactRational ExactRational::FromInteger(long long value) { return ExactRational(value, 1); }

absl::StatusOr<ExactRational> ExactRational::Create(Int128 numerator, Int128 denominator) {
  if (denominator == 0) return absl::InvalidArgumentError("division by zero");
  if (numerator == kMin || denominator == kMin) return TooLarge();
  if (denominator < 0) {
    numerator = -numerator;
    denominator = -denominator;
  }
  const Int128 divisor = Gcd(numerator, denominator);
  return ExactRational(numerator / divisor, denominator / divisor);
}

ExactRational ExactRational::Negated() const { return ExactRational(-numerator_, denominator_); }

absl::StatusOr<ExactRational> ExactRational::Plus(const ExactRational& other) const {
  // Over the least common denominator, which keeps intermediate values small.
  const Int128 divisor = Gcd(denominator_, other.denominator_);
  const Int128 this_scale = other.denominator_ / divisor;
  const Int128 other_scale = denominator_ / divisor;
  Int128 left, right, numerator, denominator;
  if (!CheckedMul(numerator_, this_scale, &left) ||
      !CheckedMul(other.numerator_, other_scale, &right) || !CheckedAdd(left, right, &numerator) ||
      !CheckedMul(denominator_, this_scale, &denominator)) {
    return TooLarge();
  }
  return Create(numerator, denominator);
}

absl::StatusOr<ExactRational> ExactRational::Minus(const ExactRational& other) const {
  return Plus(other.Negated());
}

absl::StatusOr<ExactRational> ExactRational::Times(const ExactRational& other) const {
  // Cancelling across before multiplying leaves the product already reduced.
  const Int128 first = Gcd(numerator_, other.denominator_);
  const Int128 second = Gcd(other.numerator_, denominator_);
  Int128 numerator, denominator;
  if (!CheckedMul(numerator_ / first, other.numerator_ / second, &numerator) ||
      !CheckedMul(denominator_ / second, other.denominator_ / first, &denominator)) {
    return TooLarge();
  }
  return ExactRational(numerator, denominator);
}

absl::StatusOr<ExactRational> ExactRational::DividedBy(const ExactRational& other) const {
  if (other.is_zero()) return absl::InvalidArgumentError("division by zero");
  const ExactRational reciprocal = other.numerator_ < 0
                                       ? ExactRational(-other.denominator_, -other.numerator_)
                                       : ExactRational(other.denominator_, other.numerator_);
  return Times(reciprocal);
}

absl::StatusOr<ExactRational> ExactRational::Power(Int128 exponent) const {
  if (exponent == 0) return FromInteger(1);
  ExactRational base = *this;
  if (exponent < 0) {
    if (is_zero()) {
      return absl::InvalidArgumentError("division by zero: zero raised to a negative power");
    }
    if (exponent == kMin) return TooLarge();
    base = numerator_ < 0 ? ExactRational(-denominator_, -numerator_)
                          : ExactRational(denominator_, numerator_);
    exponent = -exponent;
  }
  // Powers of coprime numbers stay coprime: no reduction needed.
  const absl::StatusOr<Int128> numerator = IntegerPower(base.numerator_, exponent);
  if (!numerator.ok()) return numerator.status();
  const absl::StatusOr<Int128> denominator = IntegerPower(base.denominator_, exponent);
  if (!denominator.ok()) return denominator.status();
  return ExactRational(*numerator, *denominator);
}

std::string ExactRational::ToDecimalString() const {
  if (!HasOnlyFactorsTwoAndFive(denominator_)) {
    // 64-bit-mantissa long double holds the quotient to ~19 digits, well past the 12 shown.
    const long double value =
        static_cast<long double>(numerator_) / static_cast<long double>(denominator_);
    char text[64];
    std::snprintf(text, sizeof(text), "%.12Lg", value);
    return std::string("≈ ") + text;
  }
  const UInt128 magnitude = Magnitude(numerator_);
  const UInt128 denominator = static_cast<UInt128>(denominator_);
  std::string text = numerator_ < 0 ? "-" : "";
  text += UInt128ToString(magnitude / denominator);
  UInt128 remainder = magnitude % denominator;
  if (remainder != 0) text += '.';
  while (remainder != 0) {
    // Next digit = (10 * remainder) / denominator, computed as ten additions reduced modulo
    // the denominator, because 10 * remainder itself can exceed 128 bits.
    UInt128 accumulated = 0;
    int digit = 0;
    for (int i = 0; i < 10; ++i) {
      accumulated += remainder;  // < 2 * denominator < 2^128
      if (accumulated >= denominator) {
        accumulated -= denominator;
        ++digit;
      }
    }
    text += static_cast<char>('0' + digit);
    remainder = accumulated;
  }
  return text;
}

std::string Int128ToString(Int128 value) {
  return (value < 0 ? "-" : "") + UInt128ToString(Magnitude(value));
}

}  // namespace hetero::example_tools
