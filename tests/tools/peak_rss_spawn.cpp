// Runs `sh -c COMMAND` as its child, waits for it, writes the peak resident memory (KiB) of the
// command and everything it waited for to REPORT_FILE, and ends the way the command ended.
//   clocklm_peak_rss_spawn REPORT_FILE COMMAND
// The hostile-input tests start commands through this small program rather than forking the test
// binary directly: Linux carries a process's peak RSS across fork and exec, so a child forked from a
// test process of hundreds of megabytes would report at least that much whatever it ran. A child
// forked from this program starts from a few megabytes.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: clocklm_peak_rss_spawn REPORT_FILE COMMAND\n");
    return 2;
  }
  pid_t pid = fork();
  if (pid < 0) return 126;
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", argv[2], static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  while (wait4(pid, &status, 0, &ru) < 0) {
  }
  if (FILE* f = std::fopen(argv[1], "w")) {
    std::fprintf(f, "%ld\n", ru.ru_maxrss);
    std::fclose(f);
  }
  if (WIFSIGNALED(status)) {
    signal(WTERMSIG(status), SIG_DFL);
    struct rlimit no_core {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    raise(WTERMSIG(status));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 126;
}
