// The planner behind `clocklm plan` and `train --config auto`: predicts the validation bits per
// byte a configuration reaches in a device-time budget, and picks the best candidate among the
// depths of the d<N> rule, the built-in presets and those presets' recipes at nearby depths. Two pieces of measurement feed it: a scaling
// law with a correction per recipe family, fitted to finished runs (plan/scaling_law.h,
// plan/plan_family.h), and the tokens/s of each candidate timed on this device. The budget then
// fixes how many bytes each candidate sees, and the law says what bpb that buys.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "plan/plan_family.h"

namespace clm {

struct PlanOptions {
  double budget_seconds = 1800;
  std::string device = "auto";
  std::string data_dir;                 // vocabulary and (val) bytes per token; empty: vocab 8192, 3.8 B/token
  std::vector<std::string> runs;        // refit the law on these runs instead of the default
  std::vector<std::string> sets;        // overrides applied to every candidate
  int min_depth = 2, max_depth = 12;    // the d<N> rule's depths searched (depth_config)
  bool presets = true;                  // the built-in presets are candidates too
  int variant_reach = 2;                // and their recipes at up to this many layers more or fewer
  int measure_top = 3;                  // candidates timed on the device (the rest estimated)
  int retime_rounds = 1;                // then each timed one is timed again this often, the faster kept
  int threads = 0;                      // 0: default_threads()
  bool progress = true;                 // progress lines on stderr
};

struct PlanCandidate {
  RunConfig cfg;
  bool preset = false;                  // a built-in preset (else a depth of the d<N> rule or a variant)
  std::string variant_of;               // the preset whose recipe this is at another depth; empty if none
  double made_for_seconds = 0;          // a preset's own budget (its recipe was screened at it); 0 if none
  std::string family;                   // recipe_family(cfg)
  double predicted_error = -1;          // expected |error| of predicted_bpb (leave-one-out); -1 unknown
  std::string note;                     // why the prediction is weaker: no runs of the family, or beyond them
  double matrix_params = 0, flops_per_token = 0;
  double tokens_per_second = 0;
  bool measured = false;                // timed on the device, or scaled from one that was
  double tokens = 0, bytes = 0, predicted_bpb = 0;
  double memory_bytes = 0;
  bool fits = true;
};

struct PlanResult {
  ScalingLaw law;
  RecipeModel model;                  // law plus the families' corrections
  // The chosen candidate first, then the rest by predicted bpb (those that fit first). The chosen
  // one is the best predicted, except that a variant must be predicted better than its preset by
  // more than its error (its edge over the size the recipe was tuned at rests on the law's size
  // term), and where a preset was made for this budget, every other candidate must be predicted
  // better than that preset by more than its error (the preset's recipe was screened at this
  // budget; a prediction within its error bar cannot overturn that).
  std::vector<PlanCandidate> ranked;
  int vocab_size = 0;
  double bytes_per_token = 0, budget_seconds = 0, plan_seconds = 0;
  std::string device;
  std::string warning;  // non-empty when the timings are suspect (a busy CPU)
  std::string choice;   // why the first row won: which preset, if any, and against what
  nlohmann::json to_json() const;
};

PlanResult make_plan(const PlanOptions& o);
// The index of the chosen candidate in `cands`, sorted by predicted bpb with those that fit first:
// the first that fits and is not within its error of its own preset (for a variant) nor of the
// preset made for the budget in its `cfg.train.budget_seconds` (0 when none fits).
size_t choose_candidate(const std::vector<PlanCandidate>& cands);
// The ranked table as text (one line a candidate).
std::string format_plan(const PlanResult& r);

}  // namespace clm
