// The one way outside JSON (configs, checkpoint metadata, manifests, tokenizer files, MCP messages,
// sweep specs, run files) is parsed: nesting depth is bounded while parsing, so no later walk over
// the value (dump, copy, comparison, a schema check) can recurse deep enough to overflow the
// stack, and every failure is a one-line description instead of an nlohmann exception.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace clm {

// Arrays and objects nested deeper than this are refused. Real files are far below it (an HF
// tokenizer.json nests < 10 levels, our configs and metadata < 6); at this depth a recursive walk
// uses a few tens of KiB of stack.
inline constexpr int kMaxJsonDepth = 256;

struct JsonParseOptions {
  bool allow_comments = false;  // /* */ and // comments (sweep specs)
};

// Parses `text` into `out`. On failure returns false and, when `why` is given, sets it to a short
// one-line reason (nlohmann's message without its exception tag, or the depth limit).
bool try_parse_json(std::string_view text, nlohmann::json& out, std::string* why = nullptr,
                    JsonParseOptions opt = {});
bool try_parse_json(std::string_view text, nlohmann::ordered_json& out, std::string* why = nullptr,
                    JsonParseOptions opt = {});

// Parses `text` or throws Error "<what>: malformed JSON: <reason>"; `what` names the file or request.
nlohmann::json parse_json(std::string_view text, std::string_view what, JsonParseOptions opt = {});
nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view what,
                                          JsonParseOptions opt = {});

}  // namespace clm
