// Child processes (see process.h): fork + exec so that the child can be given a parent-death
// signal and its own output file before it runs, which posix_spawn cannot express.
#include "lab/process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "core/common.h"

namespace clm {

namespace fs = std::filesystem;

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) fail("cannot find the clocklm executable (/proc/self/exe: {})", ec.message());
  return p.string();
}

namespace {

std::vector<char*> c_argv(std::vector<std::string>& all) {
  std::vector<char*> argv;
  for (auto& s : all) argv.push_back(s.data());
  argv.push_back(nullptr);
  return argv;
}

// In the child, between fork and exec: only async-signal-safe calls. Redirects output to `path`.
// Points file descriptor `to` (1 or 2) at `path`, appending.
void child_redirect_one(const char* path, int to) {
  int out = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (out < 0) ::_exit(127);
  ::dup2(out, to);
  if (out > 2) ::close(out);
}

void child_redirect(const char* path, const char* error_path, bool stdin_null) {
  if (stdin_null) {
    int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0 && in != 0) ::dup2(in, 0), ::close(in);
  }
  if (path && *path) {
    child_redirect_one(path, 1);
    if (error_path && *error_path) child_redirect_one(error_path, 2);
    else ::dup2(1, 2);
  }
}

}  // namespace

pid_t spawn_process(const std::string& exe, const std::vector<std::string>& args,
                    const SpawnOptions& opt) {
  std::vector<std::string> all{exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv = c_argv(all);
  const pid_t parent = ::getpid();
  // An exec failure is reported through a close-on-exec pipe: EOF means the exec succeeded.
  int pfd[2];
  if (::pipe2(pfd, O_CLOEXEC) != 0) fail("cannot start {}: pipe: {}", exe, std::strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pfd[0]), ::close(pfd[1]);
    fail("cannot start {}: fork: {}", exe, std::strerror(errno));
  }
  if (pid == 0) {
    ::close(pfd[0]);
    if (opt.parent_death_signal > 0) {
      ::prctl(PR_SET_PDEATHSIG, opt.parent_death_signal);
      if (::getppid() != parent) ::_exit(127);  // the parent died before the prctl took effect
    }
    child_redirect(opt.output.c_str(), opt.error_output.c_str(), opt.stdin_null);
    ::execv(exe.c_str(), argv.data());
    int e = errno;
    (void)!::write(pfd[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(pfd[1]);
  int e = 0;
  ssize_t n;
  while ((n = ::read(pfd[0], &e, sizeof e)) < 0 && errno == EINTR) {
  }
  ::close(pfd[0]);
  if (n == sizeof e) {
    wait_process(pid);
    fail("cannot start {}: {}", exe, std::strerror(e));
  }
  return pid;
}

int wait_process(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) fail("waiting for process {}: {}", pid, std::strerror(errno));
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 255;
}

int run_process(const std::string& exe, const std::vector<std::string>& args,
                const SpawnOptions& opt) {
  return wait_process(spawn_process(exe, args, opt));
}

void spawn_detached(const std::string& exe, const std::vector<std::string>& args,
                    const std::string& log) {
  std::vector<std::string> all{exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv = c_argv(all);
  // Double fork: the intermediate child exits at once, so the runner is adopted by init and the
  // caller has no child to reap.
  pid_t pid = ::fork();
  if (pid < 0) fail("cannot start {}: fork: {}", exe, std::strerror(errno));
  if (pid == 0) {
    ::setsid();
    pid_t g = ::fork();
    if (g != 0) ::_exit(g < 0 ? 1 : 0);
    child_redirect(log.c_str(), nullptr, true);
    ::close_range(3, ~0U, 0);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  int rc = wait_process(pid);
  if (rc != 0) fail("cannot start {} in the background", exe);
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace clm
