// Shared helpers for the data-pipeline tests: a fresh per-process scratch folder and raw file writes.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace data_test {

// Emptied and created anew; per process, since tests of several checkouts may run at once.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / fmt::format("clocklm_{}_{}", name, getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline void write_raw(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

}  // namespace data_test
