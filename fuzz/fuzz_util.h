// Shared by the libFuzzer targets: the input as text, splitting one input into several files, and
// the rule every target follows -- malformed input may only end in clm::Error; any other
// exception, a crash, a sanitizer report or a broken invariant is a finding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "core/common.h"

namespace clm::fuzz {

inline std::string_view text_of(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Up to `n` parts separated by NUL bytes (no text file of these formats holds one), so one input
// can stand for several files; missing parts are empty.
inline std::vector<std::string_view> split_files(std::string_view s, size_t n) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < n) {
    size_t z = s.find('\0');
    if (z == std::string_view::npos) break;
    out.push_back(s.substr(0, z));
    s.remove_prefix(z + 1);
  }
  out.push_back(s);
  out.resize(n);
  return out;
}

// Lines of a text (without the '\n').
inline std::vector<std::string_view> lines_of(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    size_t nl = s.find('\n');
    out.push_back(s.substr(0, nl));
    if (nl == std::string_view::npos) break;
    s.remove_prefix(nl + 1);
  }
  return out;
}

// Runs f; clm::Error is the expected outcome of malformed input. Anything else escapes to
// libFuzzer, which reports it as a crash. CLOCKLM_FUZZ_VERBOSE=1 prints the errors (to check that
// the seeds are read without one).
template <typename F>
void errors_only(F&& f) {
  static const bool verbose = std::getenv("CLOCKLM_FUZZ_VERBOSE") != nullptr;
  try {
    f();
  } catch (const Error& e) {
    if (verbose) std::fprintf(stderr, "clm::Error: %s\n", e.what());
  }
}

// An invariant the reader promises; a violation aborts (a finding) naming it.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace clm::fuzz
