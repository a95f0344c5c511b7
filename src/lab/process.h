// Child processes for the experiment tools: `sweep` and the experiment queue's runner start
// `clocklm train` as separate processes (a crash or a diverged run cannot take the caller down),
// and the queue starts its runner detached from whoever submitted the work.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace clm {

// The running executable (/proc/self/exe); throws Error if it cannot be found.
std::string self_exe();

struct SpawnOptions {
  std::string output;       // stdout and stderr appended to this file ("" = inherit)
  std::string error_output; // with `output`: stderr to this file instead
  bool stdin_null = false;  // stdin from /dev/null
  int parent_death_signal =
      0;  // > 0: the kernel sends this signal to the child when the parent dies
};

// Starts exe with args (argv[0] = exe); returns the child's pid. Throws Error when it cannot start.
pid_t spawn_process(const std::string& exe, const std::vector<std::string>& args,
                    const SpawnOptions& opt = {});
// Waits for a child; returns its exit status, or 128 + signal when it was killed.
int wait_process(pid_t pid);
// spawn_process + wait_process.
int run_process(const std::string& exe, const std::vector<std::string>& args,
                const SpawnOptions& opt = {});
// Starts exe with args in a new session, not a child of this process (nothing to wait for; it
// outlives the caller), stdin from /dev/null, stdout and stderr appended to `log`, and no file
// descriptor of the caller except 0-2.
void spawn_detached(const std::string& exe, const std::vector<std::string>& args,
                    const std::string& log);
// Whether a process with this pid exists (a zombie counts as existing).
bool process_alive(pid_t pid);

}  // namespace clm
