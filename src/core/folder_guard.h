// The folders a command must never replace, whatever flags it is given: the filesystem root, the
// home folder and its ancestors, the current folder and any folder holding it, and any folder that is or holds one
// of the command's inputs. Paths are compared after resolving symbolic links and `..`
// (weakly_canonical) and by identity (equivalent), so another spelling or a bind mount of the
// same folder is caught too.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace clm {

// Throws Error, in one line starting "<cmd>: ", when replacing the folder `target` (shown to the
// user as `shown`) would delete one of the folders above. `inputs` are files or folders the
// command reads; missing ones are skipped.
void refuse_unsafe_target(const std::string& cmd, const std::string& shown, const std::filesystem::path& target,
                          const std::vector<std::string>& inputs);

// True when `folder` is `path` or one of its ancestors (both existing; compared by identity).
bool folder_holds(const std::filesystem::path& folder, const std::filesystem::path& path);

}  // namespace clm
