// The training step (see train_step.h). The device clock brackets the whole step; the optional
// phase clocks cost a device synchronisation at each boundary, so training does not use them.
#include "train/train_step.h"

#include <cmath>
#include <memory>

#include "core/common.h"
#include "core/fault.h"

namespace clm {

StepResult train_step(GPT& model, Optimizer* opt, const int32_t* inputs, const int32_t* targets,
                      int64_t accum, int B, int T, const ScheduleValues& sched, const StepOptions& o) {
  if (accum < 1) fail("train step: {} micro-batches (need at least 1)", accum);
  Backend& be = model.backend();
  std::unique_ptr<DeviceTimer> step_clock = be.timer(), phase = be.timer();
  StepResult r;
  step_clock->start();
  model.zero_grad();
  double loss_sum = 0;
  const int64_t micro = int64_t(B) * T;
  for (int64_t a = 0; a < accum; ++a) {
    if (o.phase_times) phase->start();
    float loss;
    try {
      loss = model.forward(inputs + a * micro, targets + a * micro, B, T);
    } catch (const NonFiniteError&) {
      loss = NAN;
    }
    if (a == 0 && fault_nan_loss()) loss = NAN;
    if (!std::isfinite(loss)) throw NonFiniteError(fmt::format("loss is {} (micro-batch {})", loss, a));
    if (o.phase_times) {
      r.forward_seconds += phase->stop();
      phase->start();
    }
    model.backward(1.0f / float(accum));
    if (o.phase_times) r.backward_seconds += phase->stop();
    loss_sum += loss;
  }
  r.loss = loss_sum / double(accum);
  if (opt) {
    if (o.phase_times) phase->start();
    r.grad_norm = opt->step(sched.lr_scale, sched.wd_scale, sched.muon_momentum);
    if (o.phase_times) r.optimizer_seconds = phase->stop();
    if (!std::isfinite(r.grad_norm)) throw NonFiniteError(fmt::format("gradient norm is {}", r.grad_norm));
  }
  r.seconds = step_clock->stop();
  return r;
}

}  // namespace clm
