// Tidying a folder write when SIGINT, SIGTERM or SIGHUP ends the process: the temporary folder
// being filled is removed, and an old folder moved aside for a swap is put back (or removed once
// the new one is in place), so an interrupted command leaves nothing behind. The handler only makes
// system calls (unlinkat, openat, getdents64, rename) on paths stored beforehand, which is what a
// signal handler may safely do; it then re-raises the signal, so the process still ends as killed by
// it. SIGKILL cannot be caught: FolderWrite (folder_swap.h) repairs what a killed process left.
#pragma once
#include <string>

namespace clm {

class InterruptCleanup {
 public:
  // Registers `temp` for removal on SIGINT/SIGTERM/SIGHUP; `target` and `old` are the swap's
  // destination and the name its old folder is moved to; `lock` is a lock file of this process's,
  // removed last. Throws Error when too many are registered.
  InterruptCleanup(const std::string& temp, const std::string& target, const std::string& old,
                   const std::string& lock);
  ~InterruptCleanup();
  InterruptCleanup(const InterruptCleanup&) = delete;
  InterruptCleanup& operator=(const InterruptCleanup&) = delete;
  // While swapping, the handler also puts `old` back at `target` when `target` is absent, and
  // removes `old` when `target` is present.
  void set_swapping(bool on);

 private:
  int slot_ = -1;
};

// Removes `path` and everything under it with system calls only (usable in a signal handler);
// a symbolic link is removed, never followed. Best effort: what cannot be removed stays.
void remove_tree_signal_safe(const char* path);

}  // namespace clm
