// Progress display (see progress.h): redraws one line on a terminal, prints periodic lines otherwise.
// A log file or CI console must never get carriage returns or escape codes: those only go to a tty.
#include "core/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/common.h"

namespace clm {

static bool want_live(std::FILE* o) {
  if (const char* m = std::getenv("CLOCKLM_PROGRESS")) {
    if (std::strcmp(m, "plain") == 0) return false;
    if (std::strcmp(m, "live") == 0) return true;
  }
  const char* term = std::getenv("TERM");
  if (term && std::strcmp(term, "dumb") == 0) return false;
  return o && isatty(fileno(o));
}

Progress::Progress(std::string l, double t, std::FILE* o)
    : label(std::move(l)), total(t), out(o), tty(want_live(o)), start(now_seconds()) {
  if (tty) {
    struct winsize ws{};
    if (ioctl(fileno(o), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) width = ws.ws_col;
  }
}

Progress::~Progress() {
  if (live_shown && !finished) {
    std::fputc('\n', out);
    std::fflush(out);
  }
}

std::string fmt_eta(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = long(std::lround(s));
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02d}s", t / 60, int(t % 60));
  return fmt::format("{}h{:02d}m", t / 3600, int((t % 3600) / 60));
}

std::string Progress::line(double done, const std::string& status, double now) const {
  double elapsed = now - start;
  std::string s = label;
  if (total > 0) {
    double frac = std::clamp(done / total, 0.0, 1.0);
    s += fmt::format(" {:5.1f}%", 100.0 * frac);
    if (tty) {
      const int n = 20;
      int full = int(frac * n);
      s += " [" + std::string(full, '#') + std::string(n - full, '.') + "]";
    }
  }
  if (!status.empty()) s += " | " + status;
  s += " | " + fmt_eta(elapsed);
  if (total > 0 && done > 0 && done < total) s += " | ETA " + fmt_eta(elapsed * (total - done) / done);
  return s;
}

void Progress::update(double done, const std::string& status) {
  last_done = done;
  last_status = status;
  double now = now_seconds();
  double interval = tty ? 0.1 : log_interval;
  if (now - last_print < interval) return;
  last_print = now;
  std::string l = line(done, status, now);
  if (tty) {
    size_t w = size_t(width > 0 ? width : 120) - 1;  // never wrap: a wrapped line cannot be redrawn
    if (l.size() > w) l = l.substr(0, w);
    std::fprintf(out, "\r\033[K%s", l.c_str());
    live_shown = true;
  } else {
    std::fprintf(out, "%s\n", l.c_str());
  }
  std::fflush(out);
}

void Progress::message(const std::string& text) {
  if (tty && live_shown) {
    std::fprintf(out, "\r\033[K%s\n", text.c_str());
    std::string l = line(last_done, last_status, now_seconds());
    size_t w = size_t(width > 0 ? width : 120) - 1;
    if (l.size() > w) l = l.substr(0, w);
    std::fprintf(out, "%s", l.c_str());
  } else {
    std::fprintf(out, "%s\n", text.c_str());
  }
  std::fflush(out);
}

void Progress::finish(const std::string& status) {
  std::string l = fmt::format("{} done in {}", label, fmt_eta(now_seconds() - start));
  if (!status.empty()) l += " | " + status;
  if (tty) std::fprintf(out, "\r\033[K%s\n", l.c_str());
  else std::fprintf(out, "%s\n", l.c_str());
  std::fflush(out);
  finished = true;
  live_shown = false;
}

}  // namespace clm
