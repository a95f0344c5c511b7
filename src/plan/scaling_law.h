// The scaling law behind the planner: bpb as a function of model size and the training bytes seen,
// fitted to finished runs, with the points it is fitted to.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"

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
  std::string family;  // its recipe family (plan/plan_family.h); empty: the law's own
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

// Bytes per token of a dataset's training split (manifest.json), 0 when it records none. D, the
// law's training bytes, is tokens times this, in the fit's points and in the plan alike.
double train_bytes_per_token(const DatasetInfo& info);

}  // namespace clm
