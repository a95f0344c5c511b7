// `clocklm profile`: times N full training steps (forward, backward, optimizer) of a config on
// synthetic tokens with the profiler attached, then writes the per-op analysis (profile_report.h).
// Synthetic tokens make it independent of any dataset; op costs depend only on shapes.
#include "profile/profile_run.h"

#include <algorithm>
#include <cmath>

#include "core/common.h"
#include "profile/profile_report.h"
#include "config/config.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "train/train_setup.h"
#include "train/train_step.h"

namespace clm {

ProfileRunResult profile_training_steps(const ProfileRunOptions& o) {
  RunConfig cfg = load_config(o.config, o.sets);
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = o.default_vocab;
  if (o.seq > 0) cfg.model.seq_len = o.seq;
  validate(cfg);
  if (o.steps < 1) fail("profile: --steps must be at least 1");
  const int B = o.batch > 0 ? o.batch : cfg.train.micro_batch, T = cfg.model.seq_len;
  const int threads = cfg.train.threads > 0 ? cfg.train.threads : default_threads();

  std::shared_ptr<Backend> be = make_backend(o.device);
  be->set_threads(threads);
  TrainSetupOptions so;
  so.batch = B;
  so.seq_len = T;
  so.seed = cfg.train.seed;
  TrainSetup setup = build_train_setup(cfg, *be, so);
  GPT& model = *setup.model;
  Optimizer& opt = *setup.optimizer;
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  fill_synthetic_tokens(cfg.train.seed, cfg.model.vocab_size, inputs, targets);
  const ScheduleValues sched{1.0f, 1.0f, cfg.optim.matrix.momentum};
  auto step = [&] {
    try {
      train_step(model, &opt, inputs.data(), targets.data(), 1, B, T, sched);
    } catch (const NonFiniteError& e) {
      fail("profile: {} (config {})", e.what(), cfg.name);
    }
  };
  // Warm-up steps off the record: oneDNN builds its primitives and pages get touched.
  for (int i = 0; i < o.warmup; ++i) step();

  ProfileRunResult r;
  r.prof.clear();
  model.set_profiler(&r.prof);
  opt.set_profiler(&r.prof);
  for (int i = 0; i < o.steps; ++i) {
    double t0 = now_seconds();
    step();
    r.prof.mark_step(t0, now_seconds());
  }
  model.set_profiler(nullptr);
  opt.set_profiler(nullptr);
  for (auto& [a, b] : r.prof.steps) r.measured_seconds += b - a;
  r.tokens_per_step = double(B) * T;
  r.flops_per_token = model.flops_per_token(T);
  r.config_name = cfg.name;
  r.device = be->description();
  r.B = B;
  r.T = T;
  r.threads = threads;
  return r;
}

}  // namespace clm
