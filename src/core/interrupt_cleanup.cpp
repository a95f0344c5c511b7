// The signal-time tidying of folder writes (see interrupt_cleanup.h): a few fixed slots of paths
// that the handler reads, and a recursive removal made of system calls only.
#include "core/interrupt_cleanup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/common.h"

namespace clm {

namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the handler reads the slot states");

constexpr int kSlots = 8;
constexpr size_t kPathMax = 4096;
constexpr int kMaxDepth = 24;  // a folder written by clocklm is a few levels deep at most

enum SlotState : int { kFree = 0, kArmed = 1, kSwapping = 2 };

// The handler can reach only globals; the paths are written before the state says they are valid.
struct Slot {
  std::atomic<int> state{kFree};
  char temp[kPathMax];
  char target[kPathMax];
  char old[kPathMax];
  char lock[kPathMax];
};
Slot g_slots[kSlots];
std::mutex g_register_mutex;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

struct Dirent64 {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

bool is_dot_or_dotdot(const char* n) { return n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0)); }

bool exists_no_follow(const char* path) {
  struct stat st;
  return ::lstat(path, &st) == 0;
}

// Removes every entry of the open folder `fd`; returns true when a pass found any.
bool remove_entries(int fd, int depth);

void remove_at(int dirfd, const char* name, int depth) {
  if (::unlinkat(dirfd, name, 0) == 0 || errno == ENOENT) return;
  if ((errno != EISDIR && errno != EPERM) || depth > kMaxDepth) return;
  const int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  // Removing while reading may skip entries, so passes repeat until one finds nothing.
  for (int pass = 0; pass < 8 && remove_entries(fd, depth); ++pass) {
  }
  ::close(fd);
  ::unlinkat(dirfd, name, AT_REMOVEDIR);
}

bool remove_entries(int fd, int depth) {
  alignas(8) char buf[2048];
  bool found = false;
  ::lseek(fd, 0, SEEK_SET);
  for (;;) {
    const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const Dirent64* d = reinterpret_cast<const Dirent64*>(buf + off);
      off += d->reclen;
      if (is_dot_or_dotdot(d->name)) continue;
      remove_at(fd, d->name, depth + 1);
      found = true;
    }
  }
  return found;
}

void tidy_slot(Slot& s) {
  const int state = s.state.load();
  if (state == kFree) return;
  if (state == kSwapping && exists_no_follow(s.old)) {
    if (!exists_no_follow(s.target)) ::rename(s.old, s.target);  // killed between the two renames
    else remove_tree_signal_safe(s.old);                          // the new folder is in place
  }
  remove_tree_signal_safe(s.temp);
  ::unlink(s.lock);  // as FileLock's release does; the kernel drops the flock itself at exit
}

extern "C" void on_interrupt(int sig) {
  const int saved = errno;
  for (Slot& s : g_slots) tidy_slot(s);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // blocked until the handler returns, then ends the process as that signal does
  errno = saved;
}

// Installed once, for the signals whose action is still the default: a signal the process ignores
// (nohup) stays ignored, and a command with its own handler (training) keeps it.
void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kSignals) {
      struct sigaction cur {};
      if (::sigaction(sig, nullptr, &cur) != 0 || cur.sa_handler != SIG_DFL) continue;
      struct sigaction sa {};
      sa.sa_handler = on_interrupt;
      sigemptyset(&sa.sa_mask);
      for (int other : kSignals) sigaddset(&sa.sa_mask, other);
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

void copy_path(char (&dst)[kPathMax], const std::string& src) {
  if (src.size() >= kPathMax) fail("path too long for a folder write: {}", src);
  std::memcpy(dst, src.c_str(), src.size() + 1);
}

}  // namespace

void remove_tree_signal_safe(const char* path) { remove_at(AT_FDCWD, path, 0); }

InterruptCleanup::InterruptCleanup(const std::string& temp, const std::string& target, const std::string& old,
                                   const std::string& lock) {
  install_handler();
  std::lock_guard<std::mutex> guard(g_register_mutex);
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.state.load() != kFree) continue;
    copy_path(s.temp, temp);
    copy_path(s.target, target);
    copy_path(s.old, old);
    copy_path(s.lock, lock);
    s.state.store(kArmed);  // seq_cst: the paths are complete before the handler can see the slot
    slot_ = i;
    return;
  }
  fail("too many folders are being written at once (at most {})", kSlots);
}

InterruptCleanup::~InterruptCleanup() {
  if (slot_ >= 0) g_slots[slot_].state.store(kFree);
}

void InterruptCleanup::set_swapping(bool on) {
  if (slot_ >= 0) g_slots[slot_].state.store(on ? kSwapping : kArmed);
}

}  // namespace clm
