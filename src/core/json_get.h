// Strict number reads from parsed JSON for the readers of outside files. nlohmann's get<int>()
// silently converts (and a float out of the target's range is undefined behaviour), so a corrupt
// file could yield a wrapped id or size; these accept only integers that fit and throw Error.
#pragma once
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/common.h"

namespace clm {

// v as JSON text for an error message. Strings built by our own parsers (the CORE YAML reader)
// may hold bytes that are not UTF-8, which plain dump() refuses with an exception.
template <typename Json>
std::string json_text(const Json& v) {
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// v as an integer of type T; `what` names the value in the one-line error.
template <typename T, typename Json>
T json_int(const Json& v, const std::string& what) {
  static_assert(std::is_integral_v<T>);
  if (v.is_number_unsigned()) {
    auto u = v.template get<uint64_t>();
    if (u <= uint64_t(std::numeric_limits<T>::max())) return T(u);
  } else if (v.is_number_integer()) {
    auto i = v.template get<int64_t>();
    if (std::is_signed_v<T> && i >= int64_t(std::numeric_limits<T>::min()) &&
        i <= int64_t(std::numeric_limits<T>::max()))
      return T(i);
  }
  fail("{} must be an integer in [{}, {}], got {}", what, std::numeric_limits<T>::min(),
       std::numeric_limits<T>::max(), json_text(v));
}

// v as a string; `what` names the value in the one-line error.
template <typename Json>
const std::string& json_str(const Json& v, const std::string& what) {
  if (!v.is_string()) fail("{} must be a string, got {}", what, json_text(v));
  return v.template get_ref<const std::string&>();
}

}  // namespace clm
