// Run configuration: model shape, optimizer groups and training-loop settings, loaded from a preset
// name or a JSON file plus `--set key=value` overrides, and validated in one place. Keys are
// documented in docs/CONFIG.md.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "optim/optim_config.h"

namespace clm {

struct TrainConfig {
  int64_t batch_tokens = 4096;   // total tokens per optimizer step (grad accumulation to reach it)
  int micro_batch = 4;           // rows per forward/backward
  double budget_seconds = 600;   // device-time budget
  float warmup_frac = 0.0f;      // of the budget
  float warmdown_frac = 0.4f;    // decay to final_lr_frac over the last fraction
  float final_lr_frac = 0.0f;
  std::string warmdown_shape = "linear";  // linear (1 - p of the way) | sqrt (1 - sqrt(p): falls early)
  float muon_momentum_warmup_frac = 0.1f;  // momentum ramps 0.85 -> momentum over this fraction
  double eval_every_seconds = 120;  // periodic val bpb, in budget seconds (0 = only at the end)
  int64_t val_tokens = 1 << 20;
  double checkpoint_every_seconds = 300;
  int log_every = 1;             // steps between metrics.jsonl rows
  uint64_t seed = 1337;
  int threads = 0;               // 0 = default_threads()
  // Schedules, deterministic mode, evaluation and checkpoint keeping (see docs/CONFIG.md):
  float muon_momentum_start = 0.85f;  // Muon momentum at the start of its warmup
  std::string wd_schedule = "linear"; // constant | linear (to 0 at the end) | lr (follows the lr scale)
  int64_t max_steps = 0;         // > 0: deterministic mode, schedules over steps, stop at max_steps
  int64_t periodic_val_tokens = 131072;  // tokens of each periodic val bpb (the final uses val_tokens)
  int eval_batch = 0;            // rows per eval forward (0 = micro_batch)
  int keep_checkpoints = 1;      // newest checkpoints kept in RUN/checkpoints
  // Shorter rows early in the run: "LEN@FRAC[,LEN@FRAC...]", e.g. "256@0.5" = rows of 256 tokens
  // until half the budget, then model.seq_len. Empty = model.seq_len throughout (see docs/CONFIG.md).
  std::string seq_schedule;
  // Smaller steps early in the run: "TOKENS@FRAC[,TOKENS@FRAC...]", e.g. "4096@0.5" = steps of 4096
  // tokens until half the budget, then batch_tokens. Empty = batch_tokens throughout.
  std::string batch_schedule;
  // Recorded steps (train/step_graph.h): auto = where the device can record them (a GPU's CUDA
  // graphs) and one process runs; on = the same, a step that cannot be recorded being an error;
  // off = every op queued one by one.
  std::string graph = "auto";
};

// One stage of train.seq_schedule: rows of `seq_len` tokens while the budget fraction is < `until`.
struct SeqStage {
  int seq_len = 0;
  double until = 0;
};
// The stages of a train.seq_schedule text, checked against the model's seq_len (each length
// divides it and is shorter; lengths and fractions increase; fractions in (0, 1]); throws Error.
std::vector<SeqStage> parse_seq_schedule(const std::string& text, int model_seq_len);

// One stage of train.batch_schedule: steps of `tokens` tokens while the budget fraction is < `until`.
struct BatchStage {
  int64_t tokens = 0;
  double until = 0;
};
// The stages of a train.batch_schedule text, checked against the step's full size: each stage is
// smaller than batch_tokens and a multiple of `micro_tokens` (micro_batch x seq_len, times the ranks
// when the training loop checks it); sizes and fractions increase; fractions in (0, 1]; throws Error.
std::vector<BatchStage> parse_batch_schedule(const std::string& text, int64_t batch_tokens, int64_t micro_tokens);

struct RunConfig {
  std::string name = "custom";   // preset name or config file stem
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
};

// Preset names (baseline-50m, d4..d20, byte-11m, ...) or a path to a .json config file, then overrides
// "section.key=value" (or a unique bare "key=value"). Unknown keys and invalid values throw Error.
RunConfig load_config(const std::string& name_or_path, const std::vector<std::string>& overrides = {});
// The config a JSON text describes: its "base" preset (if any), then its keys, named `name`;
// `where` names the text in errors. Not validated (load_config validates after the overrides).
RunConfig config_from_json_text(std::string_view text, const std::string& where,
                                const std::string& name);
// Apply `--set key=value` overrides in order (a unique bare or partial key is accepted).
void apply_overrides(RunConfig& cfg, const std::vector<std::string>& overrides);
void validate(const RunConfig& cfg);  // throws Error with a one-line message
nlohmann::json to_json(const RunConfig& cfg);
RunConfig run_config_from_json(const nlohmann::json& j);  // strict: unknown keys throw
std::vector<std::string> preset_names();
// The budget a preset was made for (its recipe chosen at that budget: its train.budget_seconds), or
// 0 for presets whose budget is only the default (baseline-50m, byte-11m, the d<N> rule).
double preset_made_for_seconds(const std::string& name);
// The d<N> rule for any depth (the presets d4..d20 are the named members): n_layer = N, width 64·N,
// the batch and AdamW learning rates scaled with it (docs/CONFIG.md); vocab_size 0. Used by the
// planner, which also searches depths below d4.
RunConfig depth_config(int n_layer);
// A recipe (a preset's row length, features, optimizer and batch) at another size: the d<N> rule's
// shape for `n_layer` (width, heads) with the AdamW learning rates rescaled for it; named
// "<recipe>@d<N>". A value embedding in every block stays in every block.
RunConfig recipe_at_depth(const RunConfig& recipe, int n_layer);
// Stable fingerprint of what determines the training math (model, optim, batch, seed, schedule
// shape); excludes run-length and bookkeeping keys (budget, max_steps, eval/checkpoint cadence,
// log_every, threads, name) so a resumed run may extend its budget. Stored in checkpoints.
uint64_t config_hash(const RunConfig& cfg);

}  // namespace clm
