#include "src/runtime/chat/python_json.h"

#include <cmath>
#include <charconv>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hetero {
namespace {

// Python's json string escaping with ensure_ascii=False: only '"', '\\' and control
// characters below 0x20 are escaped; everything else is written as is.
void AppendString(const std::string& s, std::string& out) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

// float.__repr__: the shortest digits that read back to the same double (std::to_chars),
// written positionally when the decimal exponent is in [-4, 16) and otherwise as
// "d.ddde+XX" with at least two exponent digits; integral values keep a ".0".
void AppendFloat(double d, std::string& out) {
  if (std::isnan(d)) {
    out += "NaN";
    return;
  }
  if (std::isinf(d)) {
    out += d > 0 ? "Infinity" : "-Infinity";
    return;
  }
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);  // "-1.2345e+16"
  const size_t e = sci.find('e');
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = sci[0] == '-';
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c >= '0' && c <= '9') digits.push_back(c);
  }
  if (negative) out.push_back('-');
  if (exponent < -4 || exponent >= 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    absl::StrAppendFormat(&out, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return;
  }
  if (exponent < 0) {
    absl::StrAppend(&out, "0.", std::string(static_cast<size_t>(-exponent - 1), '0'), digits);
    return;
  }
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    absl::StrAppend(&out, digits, std::string(int_digits - digits.size(), '0'), ".0");
  } else {
    absl::StrAppend(&out, digits.substr(0, int_digits), ".", digits.substr(int_digits));
  }
}

void Dump(const nlohmann::ordered_json& v, int indent, int depth, std::string& out) {
  const bool pretty = indent >= 0;
  auto newline = [&](int level) {
    out.push_back('\n');
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: out += "null"; break;
    case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case nlohmann::ordered_json::value_t::number_integer: absl::StrAppend(&out, v.get<int64_t>()); break;
    case nlohmann::ordered_json::value_t::number_unsigned: absl::StrAppend(&out, v.get<uint64_t>()); break;
    case nlohmann::ordered_json::value_t::number_float: AppendFloat(v.get<double>(), out); break;
    case nlohmann::ordered_json::value_t::string: AppendString(v.get_ref<const std::string&>(), out); break;
    case nlohmann::ordered_json::value_t::array: {
      if (v.empty()) {
        out += "[]";
        break;
      }
      out.push_back('[');
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += pretty ? "," : ", ";
        first = false;
        if (pretty) newline(depth + 1);
        Dump(item, indent, depth + 1, out);
      }
      if (pretty) newline(depth);
      out.push_back(']');
      break;
    }
    case nlohmann::ordered_json::value_t::object: {
      if (v.empty()) {
        out += "{}";
        break;
      }
      out.push_back('{');
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += pretty ? "," : ", ";
        first = false;
        if (pretty) newline(depth + 1);
        AppendString(key, out);
        out += ": ";
        Dump(item, indent, depth + 1, out);
      }
      if (pretty) newline(depth);
      out.push_back('}');
      break;
    }
    default: out += "null"; break;  // binary and discarded values cannot come from text
  }
}

}  // namespace

std::string PythonJsonDumps(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  Dump(value, indent, 0, out);
  return out;
}

namespace {

// Deep nesting would make the recursive writer (and nlohmann's destructor) exhaust the
// stack; integers outside int64/uint64 would silently become doubles. Both are rejected
// before parsing, by one pass over the text that skips string contents.
constexpr int kMaxJsonDepth = 128;

absl::Status CheckJsonShape(absl::string_view text, absl::string_view what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(absl::StrCat(what, " nests deeper than ", kMaxJsonDepth, " levels"));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    } else if ((c >= '0' && c <= '9') || c == '-') {
      size_t j = i + (c == '-' ? 1 : 0);
      const size_t digits_begin = j;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
      const bool integer = j >= text.size() || (text[j] != '.' && text[j] != 'e' && text[j] != 'E');
      const absl::string_view digits = text.substr(digits_begin, j - digits_begin);
      const absl::string_view limit = c == '-' ? "9223372036854775808" : "18446744073709551615";
      if (integer && (digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit))) {
        return absl::InvalidArgumentError(absl::StrCat(what, " has the integer ", text.substr(i, j - i),
                                                       ", beyond 64 bits"));
      }
      i = j - 1;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(absl::string_view text, absl::string_view what) {
  absl::Status shape = CheckJsonShape(text, what);
  if (!shape.ok()) return shape;
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr,
                                                               /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid JSON"));
  }
  return value;
}

}  // namespace hetero
