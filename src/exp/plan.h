// The planner behind `clocklm plan` and `train --config auto`: predicts the validation bits per
// byte a configuration reaches in a device-time budget, and picks the best candidate. Two pieces of
// measurement feed it: a scaling law fitted to finished runs (bpb as a function of model size and
// bytes trained on), and the tokens/s of each candidate shape timed on this device. The budget
// then fixes how many bytes each candidate sees, and the law says what bpb that buys.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace clm {

// bpb(N, D) = E + B * (K * (N / 1e6)^(-alpha/beta) + (D / 1e6)^-1)^beta, where N counts the matrix
// (non-embedding) parameters and D the training bytes seen (tokens x bytes per token, so runs with
// different vocabularies share one axis). E, B, K >= 0. With unlimited data it falls as N^-alpha
// towards E + B K^beta N^-alpha, with an unlimited model as D^-beta towards E + B D^-beta; in between
// the two limits interact: a small model stops gaining from more data sooner than a large one, which
// an additive law E + A N^-alpha + B D^-beta cannot express.
struct ScalingLaw {
  double E = 0, B = 0, K = 0, alpha = 0, beta = 0;
  int points = 0;            // runs it was fitted to
  double rms = 0;            // root-mean-square residual on them (bpb)
  double loo_rel_error = 0;  // mean |predicted - measured| / measured, each run left out in turn
  std::string source;        // where the fit came from
  double predict(double matrix_params, double train_bytes) const;
  nlohmann::json to_json() const;
};

// One finished run as the law sees it.
struct LawPoint {
  std::string run;
  double matrix_params = 0, train_bytes = 0, bpb = 0;
};

// Finished runs (folders with summary.json and config.json) under each path: a run folder itself,
// or a folder whose subfolders (to any depth) are runs. Unfinished runs are passed over. A path that
// is a file holds recorded points instead, one JSON object a line: {"matrix_params", "train_bytes",
// "bpb"} and optionally "run" (what law_point_json writes), so a fit can include runs whose folders
// are on another machine.
std::vector<LawPoint> law_points_from_runs(const std::vector<std::string>& paths);
// Least squares over a grid of (alpha, beta, K), coarse then refined around the best (E, B >= 0
// solved exactly for each); at least 4 points with at least 2 model sizes and 2 amounts of data,
// else an Error saying what is missing.
ScalingLaw fit_scaling_law(const std::vector<LawPoint>& points);
nlohmann::json law_point_json(const LawPoint& p);
// The law fitted to this project's own CPU runs (docs/TRAINING.md, "Planning a run").
ScalingLaw default_scaling_law();

struct PlanOptions {
  double budget_seconds = 1800;
  std::string device = "auto";
  std::string data_dir;                 // vocabulary and (val) bytes per token; empty: vocab 8192, 3.8 B/token
  std::vector<std::string> runs;        // refit the law on these runs instead of the default
  std::vector<std::string> sets;        // overrides applied to every candidate
  int min_depth = 2, max_depth = 12;    // the d<N> rule's depths searched (depth_config)
  int measure_top = 3;                  // candidates timed on the device (the rest estimated)
  int threads = 0;                      // 0: default_threads()
  bool progress = true;                 // progress lines on stderr
};

struct PlanCandidate {
  RunConfig cfg;
  double matrix_params = 0, flops_per_token = 0;
  double tokens_per_second = 0;
  bool measured = false;                // timed on the device, or scaled from one that was
  double tokens = 0, bytes = 0, predicted_bpb = 0;
  double memory_bytes = 0;
  bool fits = true;
};

struct PlanResult {
  ScalingLaw law;
  std::vector<PlanCandidate> ranked;  // best (lowest predicted bpb among those that fit) first
  int vocab_size = 0;
  double bytes_per_token = 0, budget_seconds = 0, plan_seconds = 0;
  std::string device;
  std::string warning;  // non-empty when the timings are suspect (a busy CPU)
  nlohmann::json to_json() const;
};

PlanResult make_plan(const PlanOptions& o);
// The ranked table as text (one line a candidate).
std::string format_plan(const PlanResult& r);

}  // namespace clm
