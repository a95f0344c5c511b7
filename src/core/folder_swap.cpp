// The atomic folder write (see folder_swap.h): naming of the hidden folders beside NAME, the repair
// of a killed writer's leftovers, and the two-rename swap.
#include "core/folder_swap.h"

#include <fcntl.h>
#include <unistd.h>

#include <string_view>
#include <system_error>
#include <vector>

#include "core/common.h"
#include "core/fault.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

fs::path beside(const fs::path& target, std::string_view kind, long pid) {
  return target.parent_path() / fmt::format(".{}.{}.{}", target.filename().string(), kind, pid);
}

// The pid in `.NAME.<kind>.PID`, or 0 when `file` is not such a name.
long pid_in(const std::string& file, const std::string& name, std::string_view kind) {
  const std::string prefix = fmt::format(".{}.{}.", name, kind);
  if (!file.starts_with(prefix) || file.size() == prefix.size()) return 0;
  const std::string digits = file.substr(prefix.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stol(digits);
}

// The names of one kind beside `target` left by processes other than this one.
std::vector<fs::path> leftovers(const fs::path& target, std::string_view kind) {
  std::vector<fs::path> out;
  std::error_code ec;
  const std::string name = target.filename().string();
  for (auto it = fs::directory_iterator(target.parent_path(), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const long pid = pid_in(it->path().filename().string(), name, kind);
    if (pid > 0 && pid != ::getpid()) out.push_back(it->path());
  }
  return out;
}

void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void repair_folder_swap(const fs::path& target) {
  std::error_code ec;
  for (const fs::path& old : leftovers(target, "old")) {
    if (!fs::exists(fs::symlink_status(target, ec))) {
      fs::rename(old, target, ec);  // killed between the two renames: the old folder goes back
      if (ec) fail("cannot put {} back at {}: {}", old.string(), target.string(), ec.message());
    } else {
      fs::remove_all(old, ec);  // killed after the new folder was in place
    }
  }
  for (const fs::path& tmp : leftovers(target, "tmp")) fs::remove_all(tmp, ec);
  sync_folder(target.parent_path());
}

namespace {

fs::path lock_path(const fs::path& target) {
  return target.parent_path() / fmt::format(".{}.lock", target.filename().string());
}

fs::path make_parent(const fs::path& target) {
  make_dirs(target.parent_path().string());
  return lock_path(target);
}

}  // namespace

FolderWrite::FolderWrite(const fs::path& target, const std::string& what)
    : target_(target),
      temp_(beside(target, "tmp", ::getpid())),
      old_(beside(target, "old", ::getpid())),
      lock_(make_parent(target).string(), what) {
  repair_folder_swap(target_);
  std::error_code ec;
  fs::remove_all(temp_, ec);  // this pid's own, from a process that had it before
  cleanup_ = std::make_unique<InterruptCleanup>(temp_.string(), target_.string(), old_.string(),
                                                lock_path(target_).string());
  if (!fs::create_directory(temp_, ec) || ec)
    fail("cannot create {}: {}", temp_.string(), ec ? ec.message() : "it exists");
}

FolderWrite::~FolderWrite() {
  std::error_code ec;
  if (!committed_) fs::remove_all(temp_, ec);
}

void FolderWrite::commit() {
  std::error_code ec;
  sync_folder(temp_);
  if (!fs::exists(fs::symlink_status(target_, ec))) {
    fs::rename(temp_, target_, ec);
    if (ec) fail("cannot rename {} to {}: {}", temp_.string(), target_.string(), ec.message());
  } else {
    cleanup_->set_swapping(true);
    fs::rename(target_, old_, ec);
    if (ec) fail("cannot move the old {} aside: {}", target_.string(), ec.message());
    fault_point_swap();
    fs::rename(temp_, target_, ec);
    if (ec) {
      std::error_code back;
      fs::rename(old_, target_, back);
      fail("cannot rename {} to {}: {}", temp_.string(), target_.string(), ec.message());
    }
    sync_folder(target_.parent_path());
    fault_point_swap();
    fs::remove_all(old_, ec);
  }
  committed_ = true;
  sync_folder(target_.parent_path());
}

}  // namespace clm
