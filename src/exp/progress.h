// Progress display shared by train, prepare and CORE evaluation: a live status line on a terminal,
// plain periodic log lines otherwise. Owned by issue 5.
#pragma once
#include <cstdio>
#include <string>

namespace clm {

struct Progress {
  // `label` prefixes every line; `total` (<=0 unknown) is in the caller's units.
  Progress(std::string label, double total, std::FILE* out = stderr);
  // Report `done` units and a short free-form status ("loss 3.21 | 52k tok/s"). Rate-limited:
  // a terminal is redrawn at most ~10x/s, a log gets a line at most every `log_interval` seconds.
  void update(double done, const std::string& status = "");
  void finish(const std::string& status = "");  // final line (always printed)
  std::string label;
  double total;
  std::FILE* out;
  bool tty;
  double log_interval = 10.0;
  double start, last_print = -1e9;
};

}  // namespace clm
