// The `calculator` tool: exact arithmetic on an expression the model writes, so that it
// need not do sums in its head. A recursive-descent parser (no eval, no shell) over
//   expression := term (('+' | '-') term)*
//   term       := unary (('*' | '/') unary)*
//   unary      := ('+' | '-') unary | power
//   power      := primary ('^' unary)?        (right-associative; '**' is the same)
//   primary    := number | '(' expression ')'
// with × ÷ − accepted for * / -, and decimal numbers such as 12.50 or .5. Values are exact
// fractions: 0.1 + 0.2 is exactly 0.3. -2^2 is -4, as in mathematics and Python.
#ifndef HETERO_EXAMPLES_TOOLS_CALCULATOR_H_
#define HETERO_EXAMPLES_TOOLS_CALCULATOR_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "examples/tools/exact_rational.h"
#include "hetero/tools.h"

namespace hetero::example_tools {

inline constexpr int kMaxExpressionCharacters = 256;
inline constexpr int kMaxExpressionNesting = 64;

// The exact value of `expression`. InvalidArgument for a syntax error (naming the
// 1-based character position, e.g. "unexpected ')' at position 7"), division by zero, a
// non-integer exponent, nesting deeper than kMaxExpressionNesting or more than
// kMaxExpressionCharacters characters; OutOfRange ("number too large") on overflow.
absl::StatusOr<ExactRational> EvaluateExpression(std::string_view expression);

// EvaluateExpression formatted by ExactRational::ToDecimalString: "0.3", "≈ 0.333333333333".
absl::StatusOr<std::string> Calculate(std::string_view expression);

// Arguments: {"expression": string}. The result is the Calculate text.
Tool MakeCalculatorTool();

}  // namespace hetero::example_tools

#endif  // HETERO_EXAMPLES_TOOLS_CALCULATOR_H_
