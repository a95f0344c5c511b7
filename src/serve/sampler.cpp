// One-at-a-time sampling through a `clocklm sample` child (see sampler.h).
#include "serve/sampler.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "core/common.h"
#include "lab/process.h"

namespace clm {

namespace {

std::string check_request(const SampleRequest& r, const SampleLimits& l) {
  if (r.checkpoint.empty()) return "this run has no checkpoint yet";
  if (r.prompt.size() > l.max_prompt_bytes)
    return "the prompt is longer than " + std::to_string(l.max_prompt_bytes) + " bytes";
  if (r.prompt.find('\0') != std::string::npos) return "the prompt contains a NUL byte";
  if (r.tokens < 1 || r.tokens > l.max_tokens)
    return "tokens must be between 1 and " + std::to_string(l.max_tokens);
  if (!std::isfinite(r.temperature) || r.temperature < 0 || r.temperature > 100)
    return "temperature must be between 0 and 100";
  if (r.top_k < 0) return "top_k must be 0 (all) or more";
  return "";
}

// The last line starting "clocklm: error: " (without it), else the last non-empty line.
std::string error_line(const std::string& out) {
  std::string last;
  size_t s = 0;
  while (s < out.size()) {
    size_t e = out.find('\n', s);
    if (e == std::string::npos) e = out.size();
    std::string line = out.substr(s, e - s);
    if (line.starts_with("clocklm: error: ")) return line.substr(16);
    if (!line.empty()) last = line;
    s = e + 1;
  }
  return last.empty() ? "sampling failed" : last;
}

}  // namespace

SampleResult Sampler::run(const SampleRequest& req) {
  SampleResult res;
  if (std::string why = check_request(req, limits_); !why.empty()) {
    res.kind = SampleResult::bad_request;
    res.error = why;
    return res;
  }
  std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
  if (!lock.owns_lock()) {
    res.kind = SampleResult::busy;
    res.error = "another sample is being generated; try again when it is done";
    return res;
  }
  char out_name[] = "/tmp/clocklm-serve-sample-XXXXXX";
  char err_name[] = "/tmp/clocklm-serve-sample-err-XXXXXX";
  const int fd = ::mkstemp(out_name), efd = ::mkstemp(err_name);
  if (fd >= 0) ::close(fd);
  if (efd >= 0) ::close(efd);
  if (fd < 0 || efd < 0) {
    if (fd >= 0) ::unlink(out_name);
    if (efd >= 0) ::unlink(err_name);
    res.error = "cannot create a temporary file";
    return res;
  }
  const auto t0 = std::chrono::steady_clock::now();
  SpawnOptions so;
  so.output = out_name;
  so.error_output = err_name;
  so.stdin_null = true;
  so.parent_death_signal = SIGKILL;
  pid_t pid = -1;
  try {
    pid = spawn_process(
      exe_, {"sample", "--checkpoint", req.checkpoint, "--prompt=" + req.prompt, "--tokens",
             std::to_string(req.tokens), "--temperature", fmt::format("{}", req.temperature), "--top-k",
             std::to_string(req.top_k), "--seed", std::to_string(req.seed), "--stop-at-bos"},
      so);
  } catch (const Error& e) {
    ::unlink(out_name);
    ::unlink(err_name);
    res.error = e.what();
    return res;
  }
  int status = 0;
  bool killed = false;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (res.seconds > limits_.max_seconds && !killed) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string out, err;
  try {
    out = read_file(out_name);
    err = read_file(err_name);
  } catch (const Error&) {
  }
  ::unlink(out_name);
  ::unlink(err_name);
  if (killed) {
    res.error = fmt::format("sampling took longer than {} s and was stopped", limits_.max_seconds);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    res.kind = SampleResult::ok;
    if (!out.empty() && out.back() == '\n') out.pop_back();
    res.text = out;
  } else {
    res.error = error_line(err + out);
  }
  return res;
}

}  // namespace clm
