// Fuzz target: the JSON entry point every reader of outside JSON goes through (core/json_parse.h).
// The input is parsed as strict JSON and, separately, with comments allowed. A value that is
// accepted nests at most kMaxJsonDepth levels, and dumping it and parsing the dump gives it back;
// a refusal must be a one-line reason through clm::Error.
#include <string>
#include <utility>
#include <vector>

#include "core/json_parse.h"
#include "fuzz/fuzz_util.h"

namespace {

// Depth of a value counted without recursion (levels of arrays and objects).
template <typename Json>
int depth_of(const Json& root) {
  int deepest = 0;
  std::vector<std::pair<const Json*, int>> todo{{&root, 0}};
  while (!todo.empty()) {
    auto [v, d] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const auto& child : *v) todo.push_back({&child, d + 1});
  }
  return deepest;
}

template <typename Json>
void check(std::string_view text, clm::JsonParseOptions opt) {
  using namespace clm;
  Json j;
  std::string why;
  if (!try_parse_json(text, j, &why, opt)) {
    fuzz::require(!why.empty() && why.find('\n') == std::string::npos, "a refusal has a one-line reason");
    return;
  }
  fuzz::require(depth_of(j) <= kMaxJsonDepth, "accepted values nest within the limit");
  // The parser refuses strings that are not UTF-8, so the strict dump cannot throw.
  Json again;
  fuzz::require(try_parse_json(j.dump(), again), "a dump parses again");
  fuzz::require(again == j, "a dump parses back to the same value");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  const std::string_view text = fuzz::text_of(data, size);
  fuzz::errors_only([&] {
    check<nlohmann::json>(text, {});
    check<nlohmann::ordered_json>(text, {.allow_comments = true});
    parse_json(text, "input.json");  // the throwing form: clm::Error or a value
  });
  return 0;
}
