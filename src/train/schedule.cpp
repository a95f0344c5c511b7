// Schedules over the budget fraction (see schedule.h).
#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace clm {

ScheduleValues schedule_at(const TrainConfig& t, float momentum, double frac) {
  frac = std::clamp(frac, 0.0, 1.0);
  ScheduleValues v;
  double lr = 1.0;
  if (t.warmup_frac > 0 && frac < t.warmup_frac) lr = frac / t.warmup_frac;
  double wd_start = 1.0 - t.warmdown_frac;
  if (t.warmdown_frac > 0 && frac > wd_start) {
    double p = (frac - wd_start) / t.warmdown_frac;  // 0 -> 1 across the warmdown
    if (t.warmdown_shape == "sqrt") p = std::sqrt(p);
    lr = std::min(lr, 1.0 + (double(t.final_lr_frac) - 1.0) * p);
  }
  v.lr_scale = float(lr);
  if (t.muon_momentum_warmup_frac > 0 && frac < t.muon_momentum_warmup_frac)
    v.muon_momentum = float(t.muon_momentum_start + (momentum - t.muon_momentum_start) * (frac / t.muon_momentum_warmup_frac));
  else
    v.muon_momentum = momentum;
  if (t.wd_schedule == "linear") v.wd_scale = float(1.0 - frac);
  else if (t.wd_schedule == "lr") v.wd_scale = v.lr_scale;
  else v.wd_scale = 1.0f;
  return v;
}

int seq_len_at(const std::vector<SeqStage>& stages, int full_seq_len, double frac) {
  for (const SeqStage& s : stages)
    if (frac < s.until) return s.seq_len;
  return full_seq_len;
}

int64_t batch_tokens_at(const std::vector<BatchStage>& stages, int64_t full_batch_tokens, double frac) {
  for (const BatchStage& s : stages)
    if (frac < s.until) return s.tokens;
  return full_batch_tokens;
}

}  // namespace clm
