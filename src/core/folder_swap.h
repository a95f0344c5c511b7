// Writing a whole folder atomically, for every command whose output is a folder (export, prepare):
// the folder is filled as a hidden `.NAME.tmp.PID` beside NAME and renamed into place only once
// complete. An existing NAME is swapped, never deleted first: it is renamed to `.NAME.old.PID`, the
// new folder to NAME, and only then is the old one removed. A process killed at any point leaves
// NAME holding the old folder or the new one, or NAME absent with the old one at `.NAME.old.PID`;
// the next FolderWrite of NAME puts that back (NAME absent) or removes it (NAME present), and
// removes every `.NAME.tmp.PID` a killed writer left. SIGINT/SIGTERM/SIGHUP are tidied at once
// (interrupt_cleanup.h). Whether NAME may be replaced at all is the caller's decision, made after
// construction (which repairs NAME first) and before commit(); folder_guard.h has the shared rules.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "core/file_lock.h"
#include "core/interrupt_cleanup.h"

namespace clm {

class FolderWrite {
 public:
  // Creates the parent folder, takes the lock `.NAME.lock` beside `target` (refused while another
  // clocklm writes it; `what` names it in that message), repairs what a killed writer of `target`
  // left, and creates the empty temporary folder.
  FolderWrite(const std::filesystem::path& target, const std::string& what);
  // Removes the temporary folder unless commit() moved it into place.
  ~FolderWrite();
  FolderWrite(const FolderWrite&) = delete;
  FolderWrite& operator=(const FolderWrite&) = delete;

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temp() const { return temp_; }
  // Moves the finished temporary folder to `target`, swapping out an existing one (see above).
  // Throws Error, with the old folder in place, when a rename fails.
  void commit();

 private:
  std::filesystem::path target_, temp_, old_;
  FileLock lock_;
  std::unique_ptr<InterruptCleanup> cleanup_;
  bool committed_ = false;
};

// The repair FolderWrite's constructor makes, for a caller holding the lock: beside `target`, a
// `.NAME.old.PID` of another process goes back to NAME when NAME is absent and is removed
// otherwise, and a `.NAME.tmp.PID` of another process is removed. The lock proves no other clocklm
// is writing NAME, so such names are a killed writer's even where its pid has been reused.
void repair_folder_swap(const std::filesystem::path& target);

}  // namespace clm
