// The folder lock (see file_lock.h). The holder writes its pid into the lock file so the refusal
// can say who holds it, and removes the file when it lets go.
#include "core/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/common.h"

namespace clm {

FileLock::FileLock(const std::string& lock_path, const std::string& what) : path_(lock_path) {
  // The holder unlinks the file when it lets go, so a process may lock a file that was unlinked
  // after it opened it; it then tries again on the file now at the path.
  for (int attempt = 0; attempt < 100; ++attempt) {
    fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open lock file {}: {}", lock_path, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      char buf[32] = {};
      ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      fd_ = -1;
      if (e != EWOULDBLOCK) fail("cannot lock {}: {}", lock_path, std::strerror(e));
      std::string pid = n > 0 ? std::string(buf, size_t(n)) : std::string("unknown");
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      fail("{} is in use by another clocklm process (pid {}); wait for it to finish or stop it", what, pid);
    }
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(lock_path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      // Only another process's refusal message depends on the pid; the lock is held either way.
      const std::string me = std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, me.data(), me.size(), 0);
      return;
    }
    ::close(fd_);
    fd_ = -1;
  }
  fail("cannot lock {}: it keeps being replaced", lock_path);
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still holding it: a waiter that opened it will see it is gone
  ::close(fd_);             // closing the descriptor releases the flock
}

}  // namespace clm
