// Learning-rate, Muon-momentum, weight-decay, row-length and batch-size schedules as pure functions of the
// fraction of the budget used (or of step/max_steps in deterministic mode), so a run always
// finishes its warmdown exactly when its budget ends, whatever the machine's speed.
#pragma once
#include "config/config.h"

namespace clm {

struct ScheduleValues {
  float lr_scale = 1.0f;       // multiplies every group's lr
  float wd_scale = 1.0f;       // multiplies every group's weight decay
  float muon_momentum = 0.95f; // Muon momentum at this point
};

// frac in [0, 1] (clamped). `momentum` is the target Muon momentum (optim.matrix.momentum).
//   lr:  linear warmup 0 -> 1 over warmup_frac, 1, then 1 -> final_lr_frac over the last
//        warmdown_frac (reaching final_lr_frac at frac = 1): a fraction p of the way through the
//        warmdown it has gone p (warmdown_shape "linear") or sqrt(p) ("sqrt") of the way down.
//   momentum: muon_momentum_start -> momentum linearly over muon_momentum_warmup_frac.
//   wd:  constant 1 | linear 1 - frac | lr (= lr_scale).
ScheduleValues schedule_at(const TrainConfig& t, float momentum, double frac);

// Row length at budget fraction `frac`: the first stage (train.seq_schedule, parsed) whose `until`
// is above frac, else the model's full seq_len.
int seq_len_at(const std::vector<SeqStage>& stages, int full_seq_len, double frac);

// Tokens of the step at budget fraction `frac`: the first stage (train.batch_schedule, parsed)
// whose `until` is above frac, else train.batch_tokens.
int64_t batch_tokens_at(const std::vector<BatchStage>& stages, int64_t full_batch_tokens, double frac);

}  // namespace clm
