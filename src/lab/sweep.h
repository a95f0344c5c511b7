// Sweeps: a JSON spec names a base config, dataset and budget plus a list and/or grid of config
// overrides; `clocklm sweep SPEC` trains each variant one after another (each `clocklm train` a
// child process, same budget and data) into one folder, then writes a comparison and a
// leaderboard. Spec format: docs/EXPERIMENTS.md.
#pragma once
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

struct SweepRun {
  std::string name;               // folder name inside the sweep folder
  std::vector<std::string> sets;  // key=value overrides (after the spec's common "set")
};

struct SweepSpec {
  std::string name;               // sweep name (default: spec file stem)
  std::string config;             // preset or config file (relative paths: to the spec's folder)
  std::string data;               // prepared dataset folder (same rule)
  std::string budget;             // e.g. "2m"; validated with parse_duration
  std::vector<std::string> sets;  // overrides common to every run
  std::vector<SweepRun> runs;     // expanded: explicit "runs" first, then the "grid" product
  std::string core;               // optional CORE bundle (--core)
  bool profile = false;           // pass --profile to every run
  std::vector<std::string> args;  // extra arguments for every `clocklm train`
};

// Parses and validates a spec (unknown keys, missing fields, empty grids, duplicate names ->
// Error). Grid keys vary in file order, the first slowest. `base_dir` resolves relative config/data/core paths ("" = leave as given).
SweepSpec parse_sweep_spec(const nlohmann::ordered_json& j, const std::string& base_dir, const std::string& default_name);
SweepSpec load_sweep_spec(const std::string& path);
// The same from the spec file's text; `path` names it and resolves relative paths and the name.
SweepSpec parse_sweep_spec_text(std::string_view text, const std::string& path);
// Folder-safe run name for a set of overrides: {"optim.matrix.lr=0.02", "model.n_layer=6"} ->
// "lr0.02-n_layer6" (the full key when two keys share their last component).
std::string sweep_run_name(const std::vector<std::string>& sets);
// The argv of `clocklm train` for one run (without the executable).
std::vector<std::string> sweep_train_args(const SweepSpec& s, const SweepRun& r, const std::string& run_dir,
                                          bool resume);

struct SweepOptions {
  std::string out_dir;            // sweep folder (default: sweeps/<name>)
  std::string exe;                // clocklm executable (default: /proc/self/exe)
  bool dry_run = false;           // print the commands only
  bool keep_going = true;         // continue after a failed run
};

// Runs the sweep; finished runs (summary.json present) are skipped, interrupted ones resumed.
// Writes OUT/sweep.json (spec and per-run status), OUT/compare/ and OUT/leaderboard.md.
// Returns the number of failed runs.
int run_sweep(const SweepSpec& spec, const SweepOptions& opt, std::FILE* log = stderr);

}  // namespace clm
