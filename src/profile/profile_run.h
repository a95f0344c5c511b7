// `clocklm profile`: N full training steps of a config (forward, backward, optimizer) on synthetic
// tokens with the profiler attached. Analysis and files: profile_report.h.
#pragma once
#include <string>
#include <vector>

#include "core/profiler.h"

namespace clm {

struct ProfileRunOptions {
  std::string config;             // preset or JSON file
  std::vector<std::string> sets;  // --set overrides
  int steps = 3;                  // profiled steps
  int warmup = 1;                 // unprofiled steps first (primitive creation, page faults)
  int batch = 0;                  // rows per step (0 = train.micro_batch)
  int seq = 0;                    // sequence length (0 = model.seq_len)
  int default_vocab = 32768;      // when the config leaves vocab_size to the dataset
  std::string device = "auto";    // --device
};

struct ProfileRunResult {
  Profiler prof;                  // events and step spans
  double measured_seconds = 0;    // wall time of the profiled steps
  double tokens_per_step = 0, flops_per_token = 0;
  std::string config_name;
  std::string device;             // the backend's description after the steps (kernels chosen)
  int B = 0, T = 0, threads = 0;
};

ProfileRunResult profile_training_steps(const ProfileRunOptions& o);

}  // namespace clm
