// The collective watchdog (see watchdog.h). Its thread wakes once a second; ending the process
// from it with _Exit is safe whatever the main thread is doing inside MPI or NCCL, and a rank that
// exits without finalising makes mpirun end the job.
#include "dist/watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/common.h"

namespace clm {

double collective_timeout_seconds() {
  const char* e = std::getenv("CLOCKLM_COLLECTIVE_TIMEOUT");
  if (!e || !*e) return 900;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  if (!end || *end != '\0' || !(v >= 0))
    fail("CLOCKLM_COLLECTIVE_TIMEOUT must be a number of seconds >= 0 (0 = no watchdog), got '{}'", e);
  return v;
}

CollectiveWatchdog::CollectiveWatchdog(int rank, int world)
    : rank_(rank), world_(world), timeout_(collective_timeout_seconds()) {
  if (timeout_ > 0) thread_ = std::thread([this] { watch(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::enter(const char* what) {
  what_.store(what);
  since_.store(now_seconds());
}

void CollectiveWatchdog::leave() { since_.store(0); }

void CollectiveWatchdog::watch() {
  std::unique_lock<std::mutex> lock(m_);
  while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
    const double t0 = since_.load();
    if (t0 <= 0 || now_seconds() - t0 <= timeout_) continue;
    std::fprintf(stderr,
                 "clocklm: error: rank %d of %d: waited %.0f s in a collective (%s) for the other ranks; one is "
                 "stuck or gone, so the job ends (CLOCKLM_COLLECTIVE_TIMEOUT=%g)\n",
                 rank_, world_, now_seconds() - t0, what_.load(), timeout_);
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace clm
