// A small JSON Schema checker for MCP tool arguments: the subset the tool schemas use (type,
// properties, required, additionalProperties, enum, items, minItems, minimum, maximum,
// minLength), so bad arguments are refused with a one-line message before a tool runs.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace clm {

// "" when `value` satisfies `schema`, else the first violation, e.g.
// "arguments.budget: expected a string, got 5".
std::string schema_violation(const nlohmann::json& schema, const nlohmann::json& value,
                             const std::string& where = "arguments");

}  // namespace clm
