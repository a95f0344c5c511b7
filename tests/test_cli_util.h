// Shared helper for tests that run commands (mostly the clocklm binary): one command line, stdout
// and stderr captured together, and the exit status.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cli_test {

struct CmdResult {
  int status;       // exit status, -1 when the command could not be run or did not exit normally
  std::string out;  // stdout + stderr
};

// Runs a shell command line with stderr redirected into stdout.
inline CmdResult run_cmd(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// The clocklm binary the tests run: $CLOCKLM_BINARY when set (a test binary carried to another
// machine without its build folder, as bench/gpu_check.sh runs it), else the one built beside it.
inline std::string clocklm_binary() {
  const char* e = std::getenv("CLOCKLM_BINARY");
  return e && *e ? e : CLOCKLM_BINARY;
}

// `clocklm ARGS`; the output goes to *out when given. Returns the exit status.
inline int run_clocklm(const std::string& args, std::string* out = nullptr) {
  CmdResult r = run_cmd(clocklm_binary() + " " + args);
  if (out) *out = r.out;
  return r.status;
}

}  // namespace cli_test
