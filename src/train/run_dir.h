// The run directory's files (layout in docs/FORMATS.md): JSON files written atomically and the
// metrics log, appended one JSON object per line and flushed, trimmed on resume to the checkpoint.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace clm {

void write_json_file(const std::string& path, const nlohmann::json& j);  // pretty, atomic

struct MetricsLog {
  // Opens RUN/metrics.jsonl for appending. keep_through_step >= 0 (resume): first rewrites the file
  // (atomically) keeping only rows with step <= keep_through_step, so a resumed run's log has no
  // rows from steps that the checkpoint did not include. < 0: starts a new, empty file.
  MetricsLog(const std::string& path, int64_t keep_through_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void append(const nlohmann::json& row);  // one line, flushed
  std::string path;
  std::FILE* f = nullptr;
};

}  // namespace clm
