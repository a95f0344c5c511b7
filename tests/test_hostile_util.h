// Shared helper for the hostile-input tests: runs one command as a child process under a wall-clock
// limit and reports how it ended, what it printed, its peak memory and its time, so a test can
// assert "a one-line error, exit code 1, under 1 GiB and 10 s" about the real binary.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace hostile {

// Default bounds of the targets: 1 GiB peak resident memory and 10 s per command. The sanitizer
// build runs everything several times slower and with shadow memory, so its bounds are wider
// there; what they catch (a bomb of gigabytes, a quadratic loop of minutes) stays caught.
#ifdef CLOCKLM_SANITIZE
inline constexpr double kMaxSeconds = 60;
inline constexpr long kMaxRssMiB = 3072;
#else
inline constexpr double kMaxSeconds = 10;
inline constexpr long kMaxRssMiB = 1024;
#endif

struct Outcome {
  int exit_code = -1;   // exit status when the child exited, else -1
  int signal = 0;       // the signal that ended it, 0 when it exited
  bool timed_out = false;
  std::string out;      // stdout + stderr
  long peak_rss_mib = 0;
  double seconds = 0;

  // The lines printed, without empty ones.
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    size_t s = 0;
    while (s < out.size()) {
      size_t e = out.find('\n', s);
      if (e == std::string::npos) e = out.size();
      if (e > s) v.push_back(out.substr(s, e - s));
      s = e + 1;
    }
    return v;
  }
};

// The launcher that measures a command's peak memory (tests/tools/peak_rss_spawn.cpp):
// $CLOCKLM_PEAK_RSS_SPAWN when set, else the one built beside the tests.
inline std::string peak_rss_spawn() {
  const char* e = std::getenv("CLOCKLM_PEAK_RSS_SPAWN");
  return e && *e ? e : CLOCKLM_PEAK_RSS_SPAWN;
}

// The environment for a timed child. The time bounds are about our algorithms, so under the
// sanitizers the child unwinds the stack on each allocation with frame pointers: the DWARF unwinder
// CI asks for (fast_unwind_on_malloc=0) made one allocation-heavy load 7x slower. Errors are
// detected the same; only the allocation stacks in a report are shorter.
inline std::vector<std::string> timed_child_env() {
  std::vector<std::string> env;
  std::string asan = "ASAN_OPTIONS=";
  for (char** e = environ; *e; ++e) {
    if (std::string_view(*e).starts_with("ASAN_OPTIONS=")) asan = *e;
    else env.emplace_back(*e);
  }
#ifdef CLOCKLM_SANITIZE
  asan += (asan.back() == '=' ? "" : ":") + std::string("fast_unwind_on_malloc=1");
#endif
  if (asan != "ASAN_OPTIONS=") env.push_back(asan);
  return env;
}

// Runs `sh -c cmd` with stdin from `stdin_file` (or /dev/null), killing its whole process group after
// `limit_s` seconds. The peak RSS is that of the command and every process it waited for, as the
// launcher reports it.
inline Outcome run_limited(const std::string& cmd, double limit_s = kMaxSeconds * 3,
                           const std::string& stdin_file = "/dev/null") {
  Outcome r;
  char out_name[] = "/tmp/clocklm-hostile-out-XXXXXX";
  char rss_name[] = "/tmp/clocklm-hostile-rss-XXXXXX";
  int out_fd = mkstemp(out_name), rss_fd = mkstemp(rss_name);
  if (out_fd < 0 || rss_fd < 0) return r;
  const std::string spawn = peak_rss_spawn();
  std::vector<std::string> env = timed_child_env();
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int in_fd = open(stdin_file.c_str(), O_RDONLY);
    if (in_fd >= 0) dup2(in_fd, 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    execle(spawn.c_str(), spawn.c_str(), rss_name, cmd.c_str(), (char*)nullptr, envp.data());
    _exit(127);
  }
  setpgid(pid, pid);
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el > limit_s && !r.timed_out) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
    }
    usleep(2000);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kill(-pid, SIGKILL);  // anything the command left running in its group
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  std::ifstream f(out_name, std::ios::binary);
  r.out.assign(std::istreambuf_iterator<char>(f), {});
  std::ifstream rss(rss_name);
  long kib = 0;
  if (rss >> kib) r.peak_rss_mib = kib / 1024;
  close(out_fd);
  close(rss_fd);
  unlink(out_name);
  unlink(rss_name);
  return r;
}

// Every regular file under `dir` with its size and modification time, to show that a command
// removed or changed nothing of a user's (compare a snapshot before with one after).
inline std::set<std::string> snapshot(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::set<std::string> s;
  if (!fs::exists(dir)) return s;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    auto t = fs::last_write_time(e.path()).time_since_epoch().count();
    s.insert(fs::relative(e.path(), dir).string() + " " + std::to_string(e.file_size()) + " " +
             std::to_string(t));
  }
  return s;
}

// Writes `bytes` to `path` (binary).
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

}  // namespace hostile

// Asserts the usual outcome for refused input: exit code 1 (clm::Error), no signal, no timeout,
// exactly one line printed, within the memory and time bounds. `o` is a hostile::Outcome.
#define EXPECT_CLEAN_REFUSAL(o)                                                              \
  do {                                                                                       \
    EXPECT_FALSE((o).timed_out) << (o).out;                                                  \
    EXPECT_EQ((o).signal, 0) << (o).out;                                                     \
    EXPECT_NE((o).exit_code, 0) << (o).out;                                                  \
    EXPECT_EQ((o).lines().size(), 1u) << (o).out;                                            \
    EXPECT_LE((o).peak_rss_mib, hostile::kMaxRssMiB) << (o).out;                             \
    EXPECT_LE((o).seconds, hostile::kMaxSeconds) << (o).out;                                 \
  } while (0)
