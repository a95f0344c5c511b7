// The collective watchdog: a rank that waits inside one collective longer than a timeout ends its
// process with an error saying so, so a job whose peer is stuck (deadlocked, blocked on I/O,
// stopped) ends within a bounded time instead of hanging; mpirun then ends the other ranks. The
// timeout comes from CLOCKLM_COLLECTIVE_TIMEOUT (seconds; 0 = no watchdog), default 900 s: long
// enough for rank 0 to write a large checkpoint while the others wait.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace clm {

class CollectiveWatchdog {
 public:
  CollectiveWatchdog(int rank, int world);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  void enter(const char* what);  // a collective starts (`what` names it in the error)
  void leave();                  // ... and has returned
  double timeout() const { return timeout_; }

 private:
  void watch();

  int rank_, world_;
  double timeout_;
  std::atomic<double> since_{0};  // when the current collective started, 0 outside one
  std::atomic<const char*> what_{""};
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The timeout CLOCKLM_COLLECTIVE_TIMEOUT asks for (seconds; 0 = none); a malformed value is an
// Error naming it.
double collective_timeout_seconds();

}  // namespace clm
