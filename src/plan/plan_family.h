// Recipe families for the planner. The scaling law (plan/scaling_law.h) says how bpb falls with model size
// and training bytes for one recipe, the d<N> rule's. A family is everything else a configuration
// chooses that the law does not see: row length and its schedule, value embeddings, the
// Newton-Schulz coefficients, the batch schedule, the other model features. Each family other than
// the law's own gets a correction fitted to its recorded runs,
//   bpb = law(N, D) + a + b ln(D / 1e6),
// so a family whose advantage shrinks with more data (short rows) is seen to do so; a family whose
// runs cover one amount of data takes b from the nearest family its name extends. Every
// prediction carries its leave-one-out error and says when it leaves the data it was fitted to.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "plan/scaling_law.h"

namespace clm {

// The family of a configuration, e.g. "seq1024" (the d<N> rule) or "seq256+ve+polar+bsched".
// Size (depth, width, heads), learning rates and batch size are not part of it: the law and the
// d<N> rule cover those.
std::string recipe_family(const RunConfig& c);

// One family's correction to the law and the runs behind it.
struct FamilyFit {
  std::string family;
  int points = 0;
  double a = 0, b = 0;          // correction a + b ln(D / 1e6), in bpb
  std::string slope_from;       // the family b was taken from, when its own runs cover one amount of data
  double loo_abs_error = -1;    // mean |error| of its runs, each predicted without itself; -1: one run
  double min_bytes = 0, max_bytes = 0, min_params = 0, max_params = 0;  // what the runs cover
  nlohmann::json to_json() const;
};

struct RecipePrediction {
  double bpb = 0;
  double error = -1;  // expected |error| in bpb (leave-one-out); -1 when there is nothing to measure it by
  std::string note;   // empty, or why this prediction is weaker: no runs of the family, or beyond them
};

struct RecipeModel {
  ScalingLaw law;  // the base family's curve
  FamilyFit base;  // the base family's runs (a = b = 0; its error is the law's leave-one-out)
  std::vector<FamilyFit> families;
  RecipePrediction predict(const std::string& family, double matrix_params, double train_bytes) const;
  // A family other than the base with a correction fitted to its own runs.
  bool has_runs(const std::string& family) const;
  nlohmann::json to_json() const;
};

// Corrections for every family in `points` other than `base_family`, whose points only set the
// base's range (the law was fitted to them). A point's family is its `family` field, the base
// family when empty.
RecipeModel fit_recipe_model(const ScalingLaw& law, const std::string& base_family,
                             const std::vector<LawPoint>& points);

// The law fitted to the points of `base_family` (fit_scaling_law's requirements apply to those),
// then the other families' corrections.
RecipeModel fit_recipe_model_to_runs(const std::vector<LawPoint>& points, const std::string& base_family);

// The runs behind the built-in model: the built-in law's 14 points (family "seq1024") and the
// recipe screens' runs (bench/results/recipe*.json), all on the same English text at vocabulary
// 8192, D counted at its training split's 4.028 bytes per token.
std::vector<LawPoint> builtin_recipe_points();
RecipeModel default_recipe_model();

}  // namespace clm
