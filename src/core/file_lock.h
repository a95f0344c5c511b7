// An exclusive, advisory lock on a folder that one process writes (a run, a prepared dataset), so
// that a second process aiming at the same folder is refused with a clear message instead of
// interleaving its files. The lock is flock(2) on a lock file: the kernel drops it when the process
// exits in any way (kill -9 included), so a crashed run never leaves a stale lock behind (a file
// may stay after kill -9, but nobody holds it). A normal release removes the file.
#pragma once
#include <string>

namespace clm {

class FileLock {
 public:
  // Locks `lock_path` (created if missing) or throws Error: "<what> is in use by another clocklm
  // process (pid N)". `what` names the guarded thing for that message.
  FileLock(const std::string& lock_path, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace clm
