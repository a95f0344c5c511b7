// The dashboard's sample box: text from a run's newest checkpoint, produced by `clocklm sample` in
// a child process (a crash or an out-of-memory cannot take the server down, and the model's memory
// is returned when it ends), one request at a time, with the prompt, the length and the time bounded;
// a sample ends at the end of its document (the BOS token), as a completion would.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>

namespace clm {

struct SampleRequest {
  std::string checkpoint;  // a checkpoint file
  std::string prompt;
  int tokens = 64;
  double temperature = 0.8;
  int top_k = 50;
  uint64_t seed = 42;
};

struct SampleLimits {
  size_t max_prompt_bytes = 4096;
  int max_tokens = 512;
  double max_seconds = 120;  // the child is killed past this
};

struct SampleResult {
  enum Kind { ok, busy, bad_request, failed } kind = failed;
  std::string text;   // prompt + completion when ok
  std::string error;  // one line otherwise
  double seconds = 0;
};

class Sampler {
 public:
  explicit Sampler(std::string exe, SampleLimits limits = {}) : exe_(std::move(exe)), limits_(limits) {}
  // Checks the request against the limits, then runs it unless another is running (busy).
  SampleResult run(const SampleRequest& req);
  const SampleLimits& limits() const { return limits_; }

 private:
  std::string exe_;
  SampleLimits limits_;
  std::mutex busy_;
};

}  // namespace clm
