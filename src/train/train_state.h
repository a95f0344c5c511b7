// The trainer's state saved in every checkpoint's metadata (docs/CHECKPOINT.md): where the run stands
// (step, tokens, model FLOPs), the budget clock, every rank's data position, the evaluation and
// checkpoint cadence and the last periodic evaluation. One to_json and one from_json, so what is
// saved and what is restored cannot drift apart.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/budget.h"

namespace clm {

struct TrainState {
  int64_t step = 0;                    // optimizer steps taken
  int64_t tokens = 0;                  // training tokens consumed (all ranks)
  double model_flops = 0;              // model FLOPs of the steps so far (attention's depend on the row length)
  // JSON keys budget_used, budget_seconds and recent_step_seconds. The budget itself is written
  // for readers but not read back: a resumed run takes it from its config (or --budget).
  BudgetClock clock;
  double next_eval_at = 0;             // budget seconds of the next periodic evaluation
  double next_ckpt_at = 0;             // budget seconds of the next periodic checkpoint
  nlohmann::json last_val;             // {step, val_bpb, val_tokens} of the last periodic eval, or null
  // Written with each checkpoint, describing the run rather than driving it.
  int world = 1;                       // ranks that wrote the checkpoint
  std::vector<nlohmann::json> loaders; // every rank's DataLoader::state(), in rank order
  std::string tokenizer_hash;          // of the dataset trained on; empty when unknown
  std::string reason;                  // periodic | final | stopped

  nlohmann::json to_json() const;
  // Reads what to_json writes. `fallback` supplies the cadence (next_eval_at, next_ckpt_at) and
  // the budget when a key is absent; world defaults to 1, and a file without `loaders` gives its
  // one `loader`. Keys it does not know (the `rng` of older files) are ignored. `what` names the
  // checkpoint in errors. A file without model_flops counts every token at flops_per_token (the
  // full row length's).
  static TrainState from_json(const nlohmann::json& j, const TrainState& fallback, double flops_per_token,
                              const std::string& what);
};

}  // namespace clm
