#include "src/runtime/tools/json_schema.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/runtime/status_macros.h"

namespace hetero::internal {
namespace {

using nlohmann::json;

absl::Status Refuse(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<SchemaType> ParseType(const json& t, absl::string_view path) {
  if (!t.is_string()) return Refuse(path, "'type' must be one type name (type lists are not supported)");
  const std::string s = t.get<std::string>();
  if (s == "object") return SchemaType::kObject;
  if (s == "array") return SchemaType::kArray;
  if (s == "string") return SchemaType::kString;
  if (s == "number") return SchemaType::kNumber;
  if (s == "integer") return SchemaType::kInteger;
  if (s == "boolean") return SchemaType::kBoolean;
  if (s == "null") return SchemaType::kNull;
  return Refuse(path, absl::StrCat("unknown type '", s, "'"));
}

SchemaType TypeOfValue(const json& v) {
  if (v.is_string()) return SchemaType::kString;
  if (v.is_boolean()) return SchemaType::kBoolean;
  if (v.is_null()) return SchemaType::kNull;
  if (v.is_number_integer() || v.is_number_unsigned()) return SchemaType::kInteger;
  return SchemaType::kNumber;
}

bool MatchesType(const json& v, SchemaType t) {
  switch (t) {
    case SchemaType::kObject: return v.is_object();
    case SchemaType::kArray: return v.is_array();
    case SchemaType::kString: return v.is_string();
    case SchemaType::kBoolean: return v.is_boolean();
    case SchemaType::kNull: return v.is_null();
    case SchemaType::kNumber: return v.is_number();
    case SchemaType::kInteger:
      if (v.is_number_integer() || v.is_number_unsigned()) return true;
      if (v.is_number_float()) {
        const double d = v.get<double>();
        return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.007199254740992e15;
      }
      return false;
  }
  return false;
}

const char* TypeName(SchemaType t) {
  switch (t) {
    case SchemaType::kObject: return "object";
    case SchemaType::kArray: return "array";
    case SchemaType::kString: return "string";
    case SchemaType::kNumber: return "number";
    case SchemaType::kInteger: return "integer";
    case SchemaType::kBoolean: return "boolean";
    case SchemaType::kNull: return "null";
  }
  return "?";
}

absl::StatusOr<int> NonNegativeInt(const json& v, absl::string_view path, absl::string_view key) {
  if (!v.is_number_integer() && !v.is_number_unsigned()) {
    return Refuse(path, absl::StrCat("'", key, "' must be a non-negative integer"));
  }
  const int64_t x = v.get<int64_t>();
  if (x < 0 || x > (1 << 24)) return Refuse(path, absl::StrCat("'", key, "' must be between 0 and 16777216"));
  return static_cast<int>(x);
}

absl::StatusOr<std::unique_ptr<SchemaNode>> CompileNode(const json& s, const std::string& path, int depth) {
  if (!s.is_object()) return Refuse(path, "a schema must be a JSON object");
  if (depth > CompiledSchema::kMaxDepth) {
    return Refuse(path, absl::StrCat("nesting deeper than ", CompiledSchema::kMaxDepth, " levels is not supported"));
  }
  static const std::set<std::string> kKnown = {"type",      "properties", "required",  "additionalProperties",
                                               "enum",      "const",      "minimum",   "maximum",
                                               "minLength", "maxLength",  "items",     "minItems",
                                               "maxItems",  "description", "title",    "default",
                                               "examples"};
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (kKnown.count(it.key()) == 0) {
      return Refuse(path, absl::StrCat("the schema keyword '", it.key(), "' is not supported"));
    }
  }
  auto node = std::make_unique<SchemaNode>();
  std::optional<SchemaType> type;
  if (s.contains("type")) {
    HETERO_ASSIGN_OR_RETURN(SchemaType t, ParseType(s["type"], path));
    type = t;
  }
  if (s.contains("enum") || s.contains("const")) {
    if (s.contains("enum") && s.contains("const")) return Refuse(path, "'enum' and 'const' together");
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return Refuse(path, "'enum' must be a non-empty array");
      if (e.size() > static_cast<size_t>(CompiledSchema::kMaxEnumValues)) {
        return Refuse(path, absl::StrCat("'enum' has more than ", CompiledSchema::kMaxEnumValues, " values"));
      }
      for (const json& v : e) node->allowed.push_back(v);
    } else {
      node->allowed.push_back(s["const"]);
    }
    std::set<std::string> seen;
    for (const json& v : node->allowed) {
      if (v.is_object() || v.is_array()) return Refuse(path, "enum/const values must be strings, numbers, booleans or null");
      if (v.is_number_float() && !std::isfinite(v.get<double>())) return Refuse(path, "enum/const numbers must be finite");
      if (!seen.insert(v.dump()).second) return Refuse(path, absl::StrCat("'enum' repeats ", v.dump()));
      if (type.has_value() && !MatchesType(v, *type)) {
        return Refuse(path, absl::StrCat("enum value ", v.dump(), " is not of type ", TypeName(*type)));
      }
    }
    if (!type.has_value()) {
      // Without a type, all values must share one.
      SchemaType t = TypeOfValue(node->allowed[0]);
      for (const json& v : node->allowed) {
        SchemaType u = TypeOfValue(v);
        if (u == SchemaType::kInteger && t == SchemaType::kNumber) u = SchemaType::kNumber;
        if (t == SchemaType::kInteger && u == SchemaType::kNumber) t = SchemaType::kNumber;
        if (u != t) return Refuse(path, "'enum' mixes types; give 'type' or use one type");
      }
      type = t;
    }
  }
  if (!type.has_value()) return Refuse(path, "'type' is required");
  node->type = *type;

  const bool object = node->type == SchemaType::kObject;
  const bool array = node->type == SchemaType::kArray;
  const bool string = node->type == SchemaType::kString;
  const bool number = node->type == SchemaType::kNumber || node->type == SchemaType::kInteger;
  const auto only_for = [&](const char* key, bool ok, const char* type_name) -> absl::Status {
    if (s.contains(key) && !ok) return Refuse(path, absl::StrCat("'", key, "' applies to ", type_name, " schemas only"));
    return absl::OkStatus();
  };
  HETERO_RETURN_IF_ERROR(only_for("properties", object, "object"));
  HETERO_RETURN_IF_ERROR(only_for("required", object, "object"));
  HETERO_RETURN_IF_ERROR(only_for("additionalProperties", object, "object"));
  HETERO_RETURN_IF_ERROR(only_for("items", array, "array"));
  HETERO_RETURN_IF_ERROR(only_for("minItems", array, "array"));
  HETERO_RETURN_IF_ERROR(only_for("maxItems", array, "array"));
  HETERO_RETURN_IF_ERROR(only_for("minLength", string, "string"));
  HETERO_RETURN_IF_ERROR(only_for("maxLength", string, "string"));
  HETERO_RETURN_IF_ERROR(only_for("minimum", number, "number and integer"));
  HETERO_RETURN_IF_ERROR(only_for("maximum", number, "number and integer"));
  if (!node->allowed.empty() && (object || array)) return Refuse(path, "enum/const on objects or arrays is not supported");

  if (object) {
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!a.is_boolean() || a.get<bool>()) {
        return Refuse(path, "'additionalProperties' is supported only as false (the default here)");
      }
    }
    if (s.contains("properties")) {
      const json& props = s["properties"];
      if (!props.is_object()) return Refuse(path, "'properties' must be an object");
      if (props.size() > static_cast<size_t>(CompiledSchema::kMaxProperties)) {
        return Refuse(path, absl::StrCat("more than ", CompiledSchema::kMaxProperties, " properties"));
      }
      // nlohmann's default object keeps keys sorted; the declaration order comes from the
      // ordered parse the caller did (ordered_json) when available, else sorted.
      for (auto it = props.begin(); it != props.end(); ++it) {
        SchemaNode::Property p;
        p.key = it.key();
        HETERO_ASSIGN_OR_RETURN(p.schema, CompileNode(it.value(), absl::StrCat(path, ".", it.key()), depth + 1));
        node->properties.push_back(std::move(p));
      }
    }
    if (s.contains("required")) {
      const json& req = s["required"];
      if (!req.is_array()) return Refuse(path, "'required' must be an array of property names");
      for (const json& r : req) {
        if (!r.is_string()) return Refuse(path, "'required' must be an array of property names");
        bool found = false;
        for (auto& p : node->properties) {
          if (p.key == r.get<std::string>()) {
            if (p.required) return Refuse(path, absl::StrCat("'required' repeats '", p.key, "'"));
            p.required = found = true;
          }
        }
        if (!found) return Refuse(path, absl::StrCat("'required' names '", r.get<std::string>(), "', which is not a property"));
      }
    }
  }
  if (array) {
    if (!s.contains("items")) return Refuse(path, "an array schema needs 'items'");
    HETERO_ASSIGN_OR_RETURN(node->items, CompileNode(s["items"], absl::StrCat(path, "[]"), depth + 1));
    if (s.contains("minItems")) {
      HETERO_ASSIGN_OR_RETURN(node->min_items, NonNegativeInt(s["minItems"], path, "minItems"));
    }
    if (s.contains("maxItems")) {
      HETERO_ASSIGN_OR_RETURN(node->max_items, NonNegativeInt(s["maxItems"], path, "maxItems"));
    }
    if (node->max_items >= 0 && node->max_items < node->min_items) return Refuse(path, "maxItems < minItems");
  }
  if (string) {
    if (s.contains("minLength")) {
      HETERO_ASSIGN_OR_RETURN(node->min_length, NonNegativeInt(s["minLength"], path, "minLength"));
    }
    if (s.contains("maxLength")) {
      HETERO_ASSIGN_OR_RETURN(node->max_length, NonNegativeInt(s["maxLength"], path, "maxLength"));
    }
    if (node->max_length >= 0 && node->max_length < node->min_length) return Refuse(path, "maxLength < minLength");
  }
  if (number) {
    for (const char* key : {"minimum", "maximum"}) {
      if (!s.contains(key)) continue;
      const json& v = s[key];
      if (!v.is_number() || !std::isfinite(v.get<double>())) return Refuse(path, absl::StrCat("'", key, "' must be a finite number"));
      (std::string(key) == "minimum" ? node->minimum : node->maximum) = v.get<double>();
    }
    if (node->minimum && node->maximum && *node->maximum < *node->minimum) return Refuse(path, "maximum < minimum");
  }
  return node;
}

std::string Show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = absl::StrCat(s.substr(0, 57), "...");
  return s;
}

absl::Status ValidateNode(const SchemaNode& n, const json& v, const std::string& path) {
  if (!MatchesType(v, n.type)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected ", TypeName(n.type), ", got ", Show(v)));
  }
  if (!n.allowed.empty()) {
    bool ok = false;
    for (const json& a : n.allowed) ok = ok || a == v;
    if (!ok) {
      std::vector<std::string> shown;
      for (const json& a : n.allowed) shown.push_back(a.dump());
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", Show(v), " is not one of [", absl::StrJoin(shown, ", "), "]"));
    }
  }
  switch (n.type) {
    case SchemaType::kObject: {
      for (auto it = v.begin(); it != v.end(); ++it) {
        bool known = false;
        for (const auto& p : n.properties) known = known || p.key == it.key();
        if (!known) return absl::InvalidArgumentError(absl::StrCat(path, ": unexpected property '", it.key(), "'"));
      }
      for (const auto& p : n.properties) {
        const auto it = v.find(p.key);
        if (it == v.end()) {
          if (p.required) return absl::InvalidArgumentError(absl::StrCat(path, ": missing required property '", p.key, "'"));
          continue;
        }
        HETERO_RETURN_IF_ERROR(ValidateNode(*p.schema, *it, absl::StrCat(path, ".", p.key)));
      }
      break;
    }
    case SchemaType::kArray: {
      const int size = static_cast<int>(v.size());
      if (size < n.min_items) return absl::InvalidArgumentError(absl::StrCat(path, ": fewer than ", n.min_items, " items"));
      if (n.max_items >= 0 && size > n.max_items) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": more than ", n.max_items, " items"));
      }
      for (int i = 0; i < size; ++i) HETERO_RETURN_IF_ERROR(ValidateNode(*n.items, v[i], absl::StrCat(path, "[", i, "]")));
      break;
    }
    case SchemaType::kString: {
      const int length = Utf8Length(v.get_ref<const std::string&>());
      if (length < n.min_length) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": shorter than ", n.min_length, " characters"));
      }
      if (n.max_length >= 0 && length > n.max_length) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": longer than ", n.max_length, " characters"));
      }
      break;
    }
    case SchemaType::kNumber:
    case SchemaType::kInteger: {
      const double d = v.get<double>();
      if (n.minimum && d < *n.minimum) return absl::InvalidArgumentError(absl::StrCat(path, ": ", Show(v), " is below the minimum ", *n.minimum));
      if (n.maximum && d > *n.maximum) return absl::InvalidArgumentError(absl::StrCat(path, ": ", Show(v), " is above the maximum ", *n.maximum));
      break;
    }
    default:
      break;
  }
  return absl::OkStatus();
}

}  // namespace

int Utf8Length(absl::string_view s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

absl::StatusOr<std::unique_ptr<CompiledSchema>> CompiledSchema::Compile(absl::string_view schema_json,
                                                                        absl::string_view where) {
  // ordered_json keeps the properties in the order they are written, which is the order
  // constrained decoding writes them in; it is converted to the default json for the tree.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(schema_json.begin(), schema_json.end(), nullptr, /*allow_exceptions=*/false);
  if (ordered.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(where, ": the schema is not valid JSON"));
  const std::string root_path(where);
  // Convert, keeping property order: walk the ordered tree and rebuild objects in order is
  // not possible with std::map-backed json, so compile from the ordered tree directly.
  const json plain = json::parse(ordered.dump(), nullptr, false);
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<SchemaNode> root, CompileNode(plain, root_path, 0));
  if (root->type != SchemaType::kObject) return Refuse(root_path, "the root must be an object schema (type object)");
  // Restore declaration order of properties from the ordered parse.
  struct Reorder {
    static void Apply(SchemaNode& n, const nlohmann::ordered_json& s) {
      if (n.type == SchemaType::kObject && s.contains("properties")) {
        const auto& props = s["properties"];
        std::vector<SchemaNode::Property> ordered_props;
        for (auto it = props.begin(); it != props.end(); ++it) {
          for (auto& p : n.properties) {
            if (p.schema != nullptr && p.key == it.key()) {
              Apply(*p.schema, it.value());
              ordered_props.push_back(std::move(p));
              break;
            }
          }
        }
        n.properties = std::move(ordered_props);
      }
      if (n.type == SchemaType::kArray && n.items != nullptr && s.contains("items")) Apply(*n.items, s["items"]);
    }
  };
  Reorder::Apply(*root, ordered);
  auto compiled = std::unique_ptr<CompiledSchema>(new CompiledSchema());
  compiled->root_ = std::move(root);
  return compiled;
}

absl::Status CompiledSchema::Validate(const json& value, absl::string_view root_name) const {
  return ValidateNode(*root_, value, std::string(root_name));
}

}  // namespace hetero::internal
