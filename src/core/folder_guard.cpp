// The never-replace rules for destination folders (see folder_guard.h).
#include "core/folder_guard.h"

#include <cstdlib>
#include <system_error>

#include "core/common.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal() : r;
}

bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

}  // namespace

bool folder_holds(const fs::path& folder, const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(folder, ec) || !fs::exists(path, ec)) return false;
  // Both spellings of `path` are walked: the one given, and the one with links resolved.
  for (const fs::path& start : {fs::absolute(path, ec).lexically_normal(), resolved(path)}) {
    for (fs::path p = start;; p = p.parent_path()) {
      if (same_folder(folder, p)) return true;
      if (p == p.parent_path()) break;
    }
  }
  return false;
}

void refuse_unsafe_target(const std::string& cmd, const std::string& shown, const fs::path& target,
                          const std::vector<std::string>& inputs) {
  const fs::path t = resolved(target);
  if (t == t.root_path() || t.filename().empty())
    fail("{}: --out {} is the root folder; choose a folder of its own", cmd, shown);
  std::error_code ec;
  if (!fs::exists(t, ec)) return;  // holds nothing yet
  if (const char* home = std::getenv("HOME"); home && *home && folder_holds(t, home))
    fail("{}: --out {} is the home folder or holds it; choose a folder of its own", cmd, shown);
  if (folder_holds(t, fs::current_path(ec)))
    fail("{}: --out {} is the current folder or holds it; refusing to replace it (choose a new folder)", cmd,
         shown);
  for (const std::string& in : inputs)
    if (!in.empty() && folder_holds(t, in))
      fail("{}: --out {} holds {}, an input of this command; refusing to replace it (choose another folder)", cmd,
           shown, in);
}

}  // namespace clm
