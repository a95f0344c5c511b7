// Fault injection (see fault.h): parses CLOCKLM_FAULT once and counts the points it names.
#include "core/fault.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/common.h"

namespace clm {

namespace {

struct Fault {
  std::string kind, pattern;
  long at = 0, seen = 0;
};

bool is_write_kind(const std::string& k) {
  return k == "kill-in-write" || k == "slow-write" || k == "signal-in-write" || k == "interrupt-in-write";
}

bool is_count_kind(const std::string& k) {
  return k == "nan-loss" || k == "kill-at-step" || k == "signal-at-step" || k == "hang-at-step" ||
         k == "kill-in-swap" || k == "signal-in-swap";
}

// To this thread, so its handler runs here, before the faulty code goes on.
void signal_self(int sig) { ::pthread_kill(::pthread_self(), sig); }

std::vector<Fault>& faults() {
  static std::vector<Fault> list;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("CLOCKLM_FAULT");
    if (!env || !*env) return;
    std::string s = env;
    size_t p = 0;
    while (p <= s.size()) {
      size_t comma = s.find(',', p);
      if (comma == std::string::npos) comma = s.size();
      std::string item = s.substr(p, comma - p);
      p = comma + 1;
      if (item.empty()) continue;
      // "@r": only on rank r (the launcher's environment names the rank).
      if (size_t at = item.rfind('@'); at != std::string::npos) {
        const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
        const std::string want = item.substr(at + 1);
        item = item.substr(0, at);
        if ((r ? std::string(r) : std::string("0")) != want) continue;
      }
      Fault f;
      size_t c1 = item.find(':'), c2 = item.rfind(':');
      f.kind = item.substr(0, c1);
      if (is_write_kind(f.kind) && c1 != c2) {
        f.pattern = item.substr(c1 + 1, c2 - c1 - 1);
        f.at = std::atol(item.c_str() + c2 + 1);
      } else if (is_count_kind(f.kind) && c1 != std::string::npos) {
        f.at = std::atol(item.c_str() + c1 + 1);
      } else {
        // A test that misspells its fault would silently test nothing.
        std::fprintf(stderr, "clocklm: error: CLOCKLM_FAULT item '%s' is not understood\n", item.c_str());
        std::_Exit(2);
      }
      list.push_back(f);
    }
  });
  return list;
}

}  // namespace

void fault_point_write(std::string_view path) {
  for (Fault& f : faults()) {
    if (path.find(f.pattern) == std::string_view::npos) continue;
    if (f.kind == "kill-in-write" && ++f.seen == f.at) ::kill(::getpid(), SIGKILL);
    if (f.kind == "slow-write") ::usleep(useconds_t(f.at) * 1000);  // a slow disk
    if (f.kind == "signal-in-write" && ++f.seen == f.at) signal_self(SIGTERM);
    if (f.kind == "interrupt-in-write" && ++f.seen == f.at) signal_self(SIGINT);
  }
}

void fault_point_step() {
  for (Fault& f : faults()) {
    if (f.kind == "kill-at-step" && ++f.seen == f.at) ::kill(::getpid(), SIGKILL);
    if (f.kind == "signal-at-step" && ++f.seen == f.at) ::kill(::getpid(), SIGTERM);
    if (f.kind == "hang-at-step" && ++f.seen == f.at)
      for (;;) ::pause();  // alive but stuck, as a deadlocked rank would be
  }
}

void fault_point_swap() {
  for (Fault& f : faults()) {
    if (f.kind == "kill-in-swap" && ++f.seen == f.at) ::kill(::getpid(), SIGKILL);
    if (f.kind == "signal-in-swap" && ++f.seen == f.at) signal_self(SIGTERM);
  }
}

bool fault_nan_loss() {
  for (Fault& f : faults())
    if (f.kind == "nan-loss" && ++f.seen == f.at) return true;
  return false;
}

}  // namespace clm
