// The budgeted training loop behind `clocklm train`: builds the model and optimizer from a config,
// trains on a prepared dataset until the device-time budget (or train.max_steps) is spent, evaluates
// validation bits per byte, and writes the run directory (docs/FORMATS.md, docs/TRAINING.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

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
  int64_t stop_after_steps = 0;      // > 0: checkpoint and stop after this many steps of this session
  bool quiet = false;                // no progress line
  std::vector<std::string> argv;     // recorded in run.json
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
