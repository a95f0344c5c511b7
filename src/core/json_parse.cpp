// Depth-bounded JSON parsing (see json_parse.h): nlohmann's parser is iterative, so a SAX handler
// that counts open arrays and objects and stops past the limit bounds the value it builds; the
// building itself is nlohmann's own DOM handler.
#include "core/json_parse.h"

#include "core/common.h"

namespace clm {

namespace {

// Longest reason kept: nlohmann quotes the token it read last, which can be a whole long string.
constexpr size_t kMaxReason = 200;

std::string short_reason(std::string_view what) {
  if (!what.empty() && what.front() == '[') {  // "[json.exception.parse_error.101] parse error ..."
    size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  if (what.size() <= kMaxReason) return std::string(what);
  return std::string(what.substr(0, kMaxReason)) + "...";
}

// Forwards every event to nlohmann's DOM builder, refusing the array or object that would open
// one level past kMaxJsonDepth; records the first error instead of throwing it.
template <typename Json>
class DepthLimitedSax {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  explicit DepthLimitedSax(Json& out) : dom_(out, false) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool key(string_t& v) { return dom_.key(v); }
  bool start_object(std::size_t n) { return open() && dom_.start_object(n); }
  bool end_object() { return close() && dom_.end_object(); }
  bool start_array(std::size_t n) { return open() && dom_.start_array(n); }
  bool end_array() { return close() && dom_.end_array(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = short_reason(e.what());
    return false;
  }

  std::string error;

 private:
  bool open() {
    if (++depth_ <= kMaxJsonDepth) return true;
    error = fmt::format("nested deeper than {} levels", kMaxJsonDepth);
    return false;
  }
  bool close() {
    --depth_;
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  int depth_ = 0;
};

template <typename Json>
bool parse_into(std::string_view text, Json& out, std::string* why, JsonParseOptions opt) {
  Json value;
  DepthLimitedSax<Json> sax(value);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.data(), text.data() + text.size(), &sax, nlohmann::json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/opt.allow_comments);
  } catch (const nlohmann::json::exception& e) {  // the DOM builder's own checks
    sax.error = short_reason(e.what());
  }
  if (ok && sax.error.empty()) {
    out = std::move(value);
    return true;
  }
  if (why) *why = sax.error.empty() ? std::string("unreadable JSON") : sax.error;
  return false;
}

}  // namespace

bool try_parse_json(std::string_view text, nlohmann::json& out, std::string* why, JsonParseOptions opt) {
  return parse_into(text, out, why, opt);
}

bool try_parse_json(std::string_view text, nlohmann::ordered_json& out, std::string* why,
                    JsonParseOptions opt) {
  return parse_into(text, out, why, opt);
}

nlohmann::json parse_json(std::string_view text, std::string_view what, JsonParseOptions opt) {
  nlohmann::json j;
  std::string why;
  if (!try_parse_json(text, j, &why, opt)) fail("{}: malformed JSON: {}", what, why);
  return j;
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view what,
                                          JsonParseOptions opt) {
  nlohmann::ordered_json j;
  std::string why;
  if (!try_parse_json(text, j, &why, opt)) fail("{}: malformed JSON: {}", what, why);
  return j;
}

}  // namespace clm
