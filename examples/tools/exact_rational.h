// An exact rational number for the calculator: a 128-bit numerator over a positive 128-bit
// denominator, always reduced. Every operation checks for overflow and reports it instead
// of wrapping, so a result is either exact or an error; never silently rounded.
#ifndef HETERO_EXAMPLES_TOOLS_EXACT_RATIONAL_H_
#define HETERO_EXAMPLES_TOOLS_EXACT_RATIONAL_H_

#include <string>

#include "absl/status/statusor.h"

namespace hetero::example_tools {

__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

class ExactRational {
 public:
  // Zero.
  ExactRational() = default;
  static ExactRational FromInteger(long long value);
  // OutOfRange ("number too large") when the value does not fit; InvalidArgument for a
  // zero denominator.
  static absl::StatusOr<ExactRational> Create(Int128 numerator, Int128 denominator);

  Int128 numerator() const { return numerator_; }
  Int128 denominator() const { return denominator_; }
  bool is_zero() const { return numerator_ == 0; }
  bool is_integer() const { return denominator_ == 1; }

  ExactRational Negated() const;
  // OutOfRange ("number too large") on overflow.
  absl::StatusOr<ExactRational> Plus(const ExactRational& other) const;
  absl::StatusOr<ExactRational> Minus(const ExactRational& other) const;
  absl::StatusOr<ExactRational> Times(const ExactRational& other) const;
  // InvalidArgument ("division by zero") when `other` is zero.
  absl::StatusOr<ExactRational> DividedBy(const ExactRational& other) const;
  // this^exponent. InvalidArgument ("division by zero") for zero to a negative power;
  // 0^0 is 1, as in most calculators.
  absl::StatusOr<ExactRational> Power(Int128 exponent) const;

  // "0.3", "-4", "2.5" when the value has a finite decimal expansion (the denominator has
  // no prime factors other than 2 and 5), otherwise "≈ " and the value rounded to 12
  // significant digits: "≈ 0.333333333333", "≈ 3.33333333333e+19".
  std::string ToDecimalString() const;

 private:
  ExactRational(Int128 numerator, Int128 denominator)
      : numerator_(numerator), denominator_(denominator) {}

  Int128 numerator_ = 0;
  Int128 denominator_ = 1;  // > 0, coprime with the numerator
};

// Decimal text of an integer (the standard library has no formatting for 128 bits).
std::string Int128ToString(Int128 value);

}  // namespace hetero::example_tools

#endif  // HETERO_EXAMPLES_TOOLS_EXACT_RATIONAL_H_
