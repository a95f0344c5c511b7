// Fuzz target: the JSON Lines scanner of the corpus reader (parse_jsonl_text), line by line. Where
// nlohmann::json reads a line as an object with a string "text", the scanner must return the same
// text (the scanner is also more lenient: invalid UTF-8 and lone surrogates are kept or replaced).
#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  std::string text;
  for (std::string_view line : fuzz::lines_of(fuzz::text_of(data, size))) {
    JsonLineResult r = parse_jsonl_text(line, text);
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // The scanner stops at nesting depth 256; deeper lines are malformed to it by design. nlohmann
    // ends its input at a NUL byte, where the scanner (rightly) sees trailing garbage.
    size_t opens = 0;
    for (char c : line) opens += c == '[' || c == '{';
    if (j.is_discarded() || !j.is_object() || opens > 200 ||
        line.find('\0') != std::string_view::npos)
      continue;
    auto it = j.find("text");
    if (it == j.end() || !it->is_string()) {
      fuzz::require(r == JsonLineResult::malformed, "a line without a string text is malformed");
      continue;
    }
    fuzz::require(r == JsonLineResult::ok, "a valid JSON line with a text is read");
    fuzz::require(text == it->get<std::string>(), "the scanner's text equals nlohmann's");
  }
  return 0;
}
