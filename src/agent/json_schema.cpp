// JSON Schema subset checker (see json_schema.h). Keywords outside the subset are ignored, as a
// validator must ignore unknown keywords; the tool schemas are written to need no others.
#include "agent/json_schema.h"

#include <fmt/format.h>

namespace clm {

namespace {

bool has_type(const nlohmann::json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "number") return v.is_number();
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())));
  return true;
}

std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

std::string schema_violation(const nlohmann::json& schema, const nlohmann::json& v,
                             const std::string& where) {
  if (!schema.is_object()) return "";
  if (schema.contains("type")) {
    const auto& t = schema["type"];
    bool ok = false;
    std::string names;
    for (const auto& one : t.is_array() ? t : nlohmann::json::array({t})) {
      ok = ok || has_type(v, one.get<std::string>());
      names += (names.empty() ? "" : " or ") + one.get<std::string>();
    }
    if (!ok) return fmt::format("{}: expected {}, got {}", where, names, shown(v));
  }
  if (schema.contains("enum")) {
    bool found = false;
    std::string names;
    for (const auto& e : schema["enum"]) {
      found = found || e == v;
      names += (names.empty() ? "" : ", ") + e.dump();
    }
    if (!found) return fmt::format("{}: must be one of {} (got {})", where, names, shown(v));
  }
  if (v.is_number()) {
    if (schema.contains("minimum") && v.get<double>() < schema["minimum"].get<double>())
      return fmt::format("{}: must be at least {} (got {})", where, schema["minimum"].dump(),
                         v.dump());
    if (schema.contains("maximum") && v.get<double>() > schema["maximum"].get<double>())
      return fmt::format("{}: must be at most {} (got {})", where, schema["maximum"].dump(),
                         v.dump());
  }
  if (v.is_string() && schema.contains("minLength") &&
      v.get<std::string>().size() < schema["minLength"].get<size_t>())
    return fmt::format("{}: must be at least {} characters long", where,
                       schema["minLength"].get<size_t>());
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>())
      return fmt::format("{}: needs at least {} items (got {})", where,
                         schema["minItems"].get<size_t>(), v.size());
    if (schema.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        if (auto e = schema_violation(schema["items"], v[i], fmt::format("{}[{}]", where, i));
            !e.empty())
          return e;
  }
  if (v.is_object()) {
    if (schema.contains("required"))
      for (const auto& r : schema["required"])
        if (!v.contains(r.get<std::string>()))
          return fmt::format("{}: missing required property '{}'", where, r.get<std::string>());
    const auto props = schema.value("properties", nlohmann::json::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (auto e = schema_violation(props[it.key()], it.value(), where + "." + it.key());
            !e.empty())
          return e;
      } else if (schema.contains("additionalProperties") &&
                 schema["additionalProperties"] == false) {
        std::string known;
        for (auto p = props.begin(); p != props.end(); ++p)
          known += (known.empty() ? "" : ", ") + p.key();
        return fmt::format("{}: unknown property '{}' (known: {})", where, it.key(), known);
      }
    }
  }
  return "";
}

}  // namespace clm
