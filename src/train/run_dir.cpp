// Run-directory files (see run_dir.h).
#include "train/run_dir.h"

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/common.h"
#include "core/json_parse.h"

namespace clm {

void write_json_file(const std::string& path, const nlohmann::json& j) { atomic_write(path, j.dump(2) + "\n"); }

MetricsLog::MetricsLog(const std::string& p, int64_t keep_through_step) : path(p) {
  if (keep_through_step >= 0 && path_exists(path)) {
    std::istringstream in(read_file(path));
    std::string line, kept;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      nlohmann::json row;
      if (!try_parse_json(line, row) || !row.is_object()) continue;  // a torn last line from a killed run
      try {
        if (row.value("step", int64_t(0)) > keep_through_step) continue;
      } catch (const nlohmann::json::exception&) {
        continue;
      }
      kept += line + "\n";
    }
    atomic_write(path, kept);
  } else {
    atomic_write(path, "");
  }
  f = std::fopen(path.c_str(), "ab");
  if (!f) fail("cannot append to {}: {}", path, std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f) std::fclose(f);
}

void MetricsLog::append(const nlohmann::json& row) {
  std::string line = row.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f) != line.size() || std::fflush(f) != 0)
    fail("cannot write {}: {}", path, std::strerror(errno));
}

}  // namespace clm
