// Progress display shared by train, prepare and CORE evaluation: a live status line on a terminal,
// plain periodic log lines otherwise.
#pragma once
#include <cstdio>
#include <string>

namespace clm {

struct Progress {
  // `label` prefixes every line; `total` (<=0 unknown) is in the caller's units.
  // Live mode when `out` is a terminal (and TERM is not "dumb"); CLOCKLM_PROGRESS=plain|live
  // overrides the choice.
  Progress(std::string label, double total, std::FILE* out = stderr);
  ~Progress();  // ends a live line that finish() did not end, so later output starts on a new line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // Report `done` units and a short free-form status ("loss 3.21 | 52k tok/s"). Rate-limited:
  // a terminal is redrawn at most ~10x/s, a log gets a line at most every `log_interval` seconds
  // (the first update is always printed).
  void update(double done, const std::string& status = "");
  void finish(const std::string& status = "");  // final line (always printed)
  // A line of its own (e.g. "step 500 | val bpb 1.234"): on a terminal it is printed above the
  // live line, which is then redrawn.
  void message(const std::string& line);
  // The line update() would print now: "label  37.5% [####......] | status | 1m05s | ETA 1m48s"
  // (the bar only in live mode).
  std::string line(double done, const std::string& status, double now) const;

  std::string label;
  double total;
  std::FILE* out;
  bool tty;
  double log_interval = 10.0;
  double start, last_print = -1e9;
  int width = 0;                 // terminal columns (live mode; 0 = unknown -> 120)
  double last_done = 0;
  std::string last_status;
  bool live_shown = false;       // a live line is on screen without its newline
  bool finished = false;
};

// Compact durations for status lines: "42s", "3m05s", "1h02m".
std::string fmt_eta(double seconds);

}  // namespace clm
