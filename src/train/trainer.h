// The budgeted training loop behind `clocklm train`: builds the model and optimizer from a config,
// trains on a prepared dataset until the device-time budget (or train.max_steps) is spent, evaluates
// validation bits per byte, and writes the run directory (docs/FORMATS.md, docs/TRAINING.md).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

class Backend;
struct Profiler;

// What the loop needs from the layers above it, handed in by the caller (lab/train_hooks.h has the
// standard ones): the run.json record of this invocation (version, commit, machine), this CPU's
// peak FLOP/s for the MFU column (0: no MFU shown), and the writer of a profile of a few steps. An
// empty hook leaves that part out (run.json then records only argv; --profile is refused).
struct TrainHooks {
  std::function<nlohmann::json(const std::vector<std::string>& argv)> run_record;
  std::function<double(int threads)> cpu_peak_flops;
  std::function<void(const Profiler& prof, const std::string& dir, double seconds, int steps)> write_profile;
};

struct TrainOptions {
  std::string config;                // preset or JSON file; empty with resume = RUN/config.json
  std::vector<std::string> sets;     // --set key=value overrides
  std::string data_dir;              // prepared dataset folder
  std::string out_dir;               // RUN
  std::string resume_dir;            // --resume RUN (out_dir defaults to it)
  double budget_seconds = -1;        // --budget; < 0 = train.budget_seconds from the config
  bool profile = false;              // --profile: profile a few steps into RUN/profile/
  std::string core_bundle;           // --core BUNDLE: CORE score at the end (summary.json "core")
  std::string device = "auto";       // --device cpu | cuda[:N] | auto
  // Single process: the device to train on instead of `device` (the tests wrap the CPU backend to
  // count what a run reads from the device).
  std::shared_ptr<Backend> backend;
  int64_t stop_after_steps = 0;      // > 0: checkpoint and stop after this many steps of this session
  bool quiet = false;                // no progress line
  std::vector<std::string> argv;     // recorded in run.json
  TrainHooks hooks;
};

struct TrainResult {
  bool finished = false;   // false when stopped early by stop_after_steps (no final eval)
  double val_bpb = 0;
  int64_t steps = 0, tokens = 0;
  int rank = 0;            // this process's rank (only rank 0 prints the result)
  double device_seconds = 0;
  nlohmann::json summary;
};

TrainResult train(const TrainOptions& opt);

}  // namespace clm
