#include "src/runtime/chat/python_json.h"

#include <cmath>
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

// float.__repr__: the shortest text that reads back to the same double, with Python's
// spelling of exponents ("1e-05") and a ".0" on integral values.
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
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  const size_t e = s.find('e');
  std::string mantissa = e == std::string::npos ? s : s.substr(0, e);
  std::string exponent = e == std::string::npos ? "" : s.substr(e + 1);
  if (!exponent.empty()) {
    // Python: repr switches to exponent form for exp < -4 or >= 16 and writes at least two
    // exponent digits.
    int exp = std::stoi(exponent);
    if (exp >= -4 && exp < 16) {
      // Python writes these positionally: the shortest such form that reads back exactly.
      for (int decimals = 0; decimals <= 17; ++decimals) {
        std::snprintf(buf, sizeof buf, "%.*f", decimals, d);
        if (std::strtod(buf, nullptr) == d) break;
      }
      mantissa = buf;
      exponent.clear();
    } else {
      const char sign = exp < 0 ? '-' : '+';
      exponent = absl::StrFormat("e%c%02d", sign, std::abs(exp));
    }
  }
  if (exponent.empty() && mantissa.find('.') == std::string::npos) {
    mantissa += ".0";
  }
  out += mantissa + exponent;
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

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(absl::string_view text, absl::string_view what) {
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr,
                                                               /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid JSON"));
  }
  return value;
}

}  // namespace hetero
