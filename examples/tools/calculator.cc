#include "examples/tools/calculator.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "examples/tools/tool_arguments.h"

namespace hetero::example_tools {
namespace {

enum class TokenKind { kNumber, kPlus, kMinus, kTimes, kDivide, kPower, kOpen, kClose, kEnd };

struct Token {
  TokenKind kind;
  int position;         // 1-based character (code point) position, for messages
  std::string text;     // as written, for messages
  ExactRational value;  // kNumber only
};

// Decodes the UTF-8 sequence at `offset`; false when it is malformed. Only what is needed
// to count characters and recognise × ÷ −; overlong forms are not worth rejecting here.
bool DecodeUtf8(std::string_view text, size_t offset, uint32_t* code_point, size_t* length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[offset + i]); };
  const unsigned char lead = byte(0);
  size_t count;
  if (lead < 0x80) {
    count = 1;
    *code_point = lead;
  } else if ((lead & 0xE0) == 0xC0) {
    count = 2;
    *code_point = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    count = 3;
    *code_point = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    count = 4;
    *code_point = lead & 0x07;
  } else {
    return false;
  }
  if (offset + count > text.size()) return false;
  for (size_t i = 1; i < count; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return false;
    *code_point = (*code_point << 6) | (byte(i) & 0x3F);
  }
  *length = count;
  return true;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A decimal literal: digits with at most one '.', e.g. 12, 12.50, .5, 5. — as the exact
// fraction digits / 10^(digits after the point).
absl::StatusOr<ExactRational> ParseDecimal(std::string_view literal, int position) {
  Int128 digits = 0;
  Int128 scale = 1;
  bool after_point = false;
  for (const char c : literal) {
    if (c == '.') {
      after_point = true;
      continue;
    }
    if (__builtin_mul_overflow(digits, 10, &digits) ||
        __builtin_add_overflow(digits, c - '0', &digits) ||
        (after_point && __builtin_mul_overflow(scale, 10, &scale))) {
      return absl::OutOfRangeError(
          absl::StrCat("number too large at position ", position, " (at most 38 digits)"));
    }
  }
  return ExactRational::Create(digits, scale);
}

// Why a character cannot appear, phrased so that the model can rewrite its expression.
std::string UnexpectedCharacter(std::string_view character, int position) {
  std::string message =
      absl::StrCat("unexpected '", std::string(character), "' at position ", position);
  if (character == "%") {
    absl::StrAppend(&message, ": percent signs are not supported; write 15% of 80 as 15/100*80");
  } else if (character == ",") {
    absl::StrAppend(&message, ": write numbers without thousands separators, e.g. 1000");
  } else {
    absl::StrAppend(&message, ": only numbers, + - * / ^, parentheses and spaces are allowed");
  }
  return message;
}

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view expression) {
  std::vector<Token> tokens;
  size_t offset = 0;
  int position = 0;
  while (offset < expression.size()) {
    ++position;
    uint32_t code_point;
    size_t length;
    if (!DecodeUtf8(expression, offset, &code_point, &length)) {
      return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8 at position ", position));
    }
    const std::string_view character = expression.substr(offset, length);
    const char c = expression[offset];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      offset += length;
      continue;
    }
    if (IsDigit(c) || c == '.') {
      size_t end = offset;
      bool seen_point = false;
      bool seen_digit = false;
      while (end < expression.size() &&
             (IsDigit(expression[end]) || (expression[end] == '.' && !seen_point))) {
        seen_point |= expression[end] == '.';
        seen_digit |= IsDigit(expression[end]);
        ++end;
      }
      if (!seen_digit) return absl::InvalidArgumentError(UnexpectedCharacter(".", position));
      const std::string_view literal = expression.substr(offset, end - offset);
      absl::StatusOr<ExactRational> value = ParseDecimal(literal, position);
      if (!value.ok()) return value.status();
      tokens.push_back({TokenKind::kNumber, position, std::string(literal), *value});
      position += static_cast<int>(literal.size()) - 1;
      offset = end;
      continue;
    }
    const int start = position;
    TokenKind kind;
    if (c == '*' && offset + 1 < expression.size() && expression[offset + 1] == '*') {
      kind = TokenKind::kPower;  // Python's spelling, which models often write
      length = 2;
      ++position;
    } else if (c == '+') {
      kind = TokenKind::kPlus;
    } else if (c == '-' || code_point == 0x2212) {  // − minus sign
      kind = TokenKind::kMinus;
    } else if (c == '*' || code_point == 0xD7) {  // × multiplication sign
      kind = TokenKind::kTimes;
    } else if (c == '/' || code_point == 0xF7) {  // ÷ division sign
      kind = TokenKind::kDivide;
    } else if (c == '^') {
      kind = TokenKind::kPower;
    } else if (c == '(') {
      kind = TokenKind::kOpen;
    } else if (c == ')') {
      kind = TokenKind::kClose;
    } else {
      return absl::InvalidArgumentError(UnexpectedCharacter(character, position));
    }
    tokens.push_back(
        {kind, start, std::string(expression.substr(offset, length)), ExactRational()});
    offset += length;
  }
  tokens.push_back({TokenKind::kEnd, position + 1, "", ExactRational()});
  return tokens;
}

// Adds where an arithmetic error happened to the message of ExactRational.
absl::Status AtOperator(const absl::Status& status, const Token& op) {
  return absl::Status(status.code(), absl::StrCat(status.message(), " (at '", op.text,
                                                  "', position ", op.position, ")"));
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<ExactRational> ParseAll() {
    absl::StatusOr<ExactRational> value = ParseExpression();
    if (!value.ok()) return value;
    if (Peek().kind != TokenKind::kEnd) return Unexpected(Peek());
    return value;
  }

 private:
  // Counts open levels of parentheses, signs and exponents, so that deep input fails
  // with a message instead of exhausting the stack.
  class NestingGuard {
   public:
    explicit NestingGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~NestingGuard() { --*depth_; }
    bool too_deep() const { return *depth_ > kMaxExpressionNesting; }

   private:
    int* depth_;
  };

  const Token& Peek() const { return tokens_[next_]; }
  const Token& Take() { return tokens_[next_++]; }

  absl::Status Unexpected(const Token& token) const {
    if (token.kind == TokenKind::kEnd) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected end of expression at position ",
                                                     token.position, ": expected a number or '('"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected '", token.text, "' at position ", token.position));
  }

  absl::Status TooDeep(const Token& token) const {
    return absl::InvalidArgumentError(absl::StrCat("expression nested too deeply at position ",
                                                   token.position, " (limit ",
                                                   kMaxExpressionNesting, " levels)"));
  }

  absl::StatusOr<ExactRational> ParseExpression() {
    absl::StatusOr<ExactRational> left = ParseTerm();
    while (left.ok() && (Peek().kind == TokenKind::kPlus || Peek().kind == TokenKind::kMinus)) {
      const Token& op = Take();
      const absl::StatusOr<ExactRational> right = ParseTerm();
      if (!right.ok()) return right;
      left = op.kind == TokenKind::kPlus ? left->Plus(*right) : left->Minus(*right);
      if (!left.ok()) return AtOperator(left.status(), op);
    }
    return left;
  }

  absl::StatusOr<ExactRational> ParseTerm() {
    absl::StatusOr<ExactRational> left = ParseUnary();
    while (left.ok() && (Peek().kind == TokenKind::kTimes || Peek().kind == TokenKind::kDivide)) {
      const Token& op = Take();
      const absl::StatusOr<ExactRational> right = ParseUnary();
      if (!right.ok()) return right;
      left = op.kind == TokenKind::kTimes ? left->Times(*right) : left->DividedBy(*right);
      if (!left.ok()) return AtOperator(left.status(), op);
    }
    return left;
  }

  absl::StatusOr<ExactRational> ParseUnary() {
    if (Peek().kind != TokenKind::kPlus && Peek().kind != TokenKind::kMinus) return ParsePower();
    const Token& sign = Take();
    const NestingGuard guard(&depth_);
    if (guard.too_deep()) return TooDeep(sign);
    absl::StatusOr<ExactRational> operand = ParseUnary();
    if (!operand.ok() || sign.kind == TokenKind::kPlus) return operand;
    return operand->Negated();
  }

  absl::StatusOr<ExactRational> ParsePower() {
    absl::StatusOr<ExactRational> base = ParsePrimary();
    if (!base.ok() || Peek().kind != TokenKind::kPower) return base;
    const Token& op = Take();
    const NestingGuard guard(&depth_);
    if (guard.too_deep()) return TooDeep(op);
    // The exponent is a unary, so 2^-2 works and 2^3^2 groups as 2^(3^2).
    const absl::StatusOr<ExactRational> exponent = ParseUnary();
    if (!exponent.ok()) return exponent;
    if (!exponent->is_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("the exponent of '", op.text, "' at position ",
                                                     op.position, " must be a whole number, not ",
                                                     exponent->ToDecimalString()));
    }
    absl::StatusOr<ExactRational> power = base->Power(exponent->numerator());
    if (!power.ok()) return AtOperator(power.status(), op);
    return power;
  }

  absl::StatusOr<ExactRational> ParsePrimary() {
    if (Peek().kind != TokenKind::kNumber && Peek().kind != TokenKind::kOpen) {
      return Unexpected(Peek());
    }
    const Token& token = Take();
    if (token.kind == TokenKind::kNumber) return token.value;
    const NestingGuard guard(&depth_);
    if (guard.too_deep()) return TooDeep(token);
    absl::StatusOr<ExactRational> inner = ParseExpression();
    if (!inner.ok()) return inner;
    if (Peek().kind != TokenKind::kClose) {
      if (Peek().kind == TokenKind::kEnd) {
        return absl::InvalidArgumentError(
            absl::StrCat("missing ')' for the '(' at position ", token.position));
      }
      return Unexpected(Peek());
    }
    Take();
    return inner;
  }

  std::vector<Token> tokens_;
  size_t next_ = 0;
  int depth_ = 0;
};

int CountCharacters(std::string_view text) {
  int count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

}  // namespace

absl::StatusOr<ExactRational> EvaluateExpression(std::string_view expression) {
  const int characters = CountCharacters(expression);
  if (characters > kMaxExpressionCharacters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expression too long: ", characters, " characters (limit ", kMaxExpressionCharacters, ")"));
  }
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(expression);
  if (!tokens.ok()) return tokens.status();
  if (tokens->size() == 1) return absl::InvalidArgumentError("empty expression");
  Parser parser(*std::move(tokens));
  return parser.ParseAll();
}

absl::StatusOr<std::string> Calculate(std::string_view expression) {
  const absl::StatusOr<ExactRational> value = EvaluateExpression(expression);
  if (!value.ok()) return value.status();
  return value->ToDecimalString();
}

Tool MakeCalculatorTool() {
  Tool tool;
  tool.name = "calculator";
  tool.description =
      "Evaluates an arithmetic expression exactly and returns the result. Supports + - * /, "
      "^ for whole-number powers (2^10, 2^-2), parentheses and decimal numbers (12.5, .5). "
      "No variables, functions, percent signs or thousands separators: write 15% of 80 as "
      "15/100*80. Results that are not exact decimals start with '≈'.";
  tool.parameters_json = R"({
  "type": "object",
  "properties": {
    "expression": {
      "type": "string",
      "minLength": 1,
      "maxLength": 64,
      "description": "The arithmetic expression, e.g. (12.5 + 7) * 3 / 4"
    }
  },
  "required": ["expression"]
})";
  tool.handler = [](const std::string& arguments_json) -> absl::StatusOr<std::string> {
    return RunWithoutExceptions("calculator", [&]() -> absl::StatusOr<std::string> {
      const absl::StatusOr<nlohmann::json> arguments = ParseArgumentsObject(arguments_json);
      if (!arguments.ok()) return arguments.status();
      const absl::StatusOr<std::string> expression = RequiredString(*arguments, "expression");
      if (!expression.ok()) return expression.status();
      return Calculate(*expression);
    });
  };
  return tool;
}

}  // namespace hetero::example_tools
