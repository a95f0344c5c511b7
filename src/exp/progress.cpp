// Progress display (see progress.h): redraws one line on a terminal, prints periodic lines otherwise.
#include "exp/progress.h"

#include <unistd.h>

#include "core/common.h"

namespace clm {

Progress::Progress(std::string l, double t, std::FILE* o)
    : label(std::move(l)), total(t), out(o), tty(isatty(fileno(o))), start(now_seconds()) {}

static std::string eta_text(double elapsed, double done, double total) {
  if (total <= 0 || done <= 0 || done >= total) return "";
  double eta = elapsed * (total - done) / done;
  return fmt::format(" | ETA {:.0f}s", eta);
}

void Progress::update(double done, const std::string& status) {
  double now = now_seconds();
  double interval = tty ? 0.1 : log_interval;
  if (now - last_print < interval) return;
  last_print = now;
  std::string pct = total > 0 ? fmt::format(" {:5.1f}%", 100.0 * done / total) : "";
  std::string line = fmt::format("{}{} | {}{}", label, pct, status, eta_text(now - start, done, total));
  if (tty) std::fprintf(out, "\r\033[K%s", line.c_str());
  else std::fprintf(out, "%s\n", line.c_str());
  std::fflush(out);
}

void Progress::finish(const std::string& status) {
  std::string line = fmt::format("{} done in {:.1f}s | {}", label, now_seconds() - start, status);
  if (tty) std::fprintf(out, "\r\033[K%s\n", line.c_str());
  else std::fprintf(out, "%s\n", line.c_str());
  std::fflush(out);
}

}  // namespace clm
