// One training step, the only one: zero the gradients, forward and backward over the micro-batches
// of one optimizer step (gradient accumulation), then the optimizer update. `train`, `profile` and
// `bench train` all call it, so what they time is the same computation.
#pragma once
#include <cstdint>

#include "model/gpt.h"
#include "optim/optim.h"
#include "train/schedule.h"

namespace clm {

struct StepResult {
  double loss = 0;         // mean training loss over the micro-batches (nats)
  float grad_norm = 0;     // global gradient norm before clipping (0 without an optimizer)
  double seconds = 0;      // device time of the whole step
  // Device time per phase, summed over micro-batches; only with StepOptions::phase_times (each
  // phase boundary then waits for the device).
  double forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0;
};

struct StepOptions {
  bool phase_times = false;
};

// inputs/targets: `accum` micro-batches of B x T tokens, back to back, in host memory. opt may be
// null (forward and backward only). Throws NonFiniteError naming the micro-batch when a loss, or
// the gradient norm, is NaN or infinite; the weights are then unchanged by this step.
StepResult train_step(GPT& model, Optimizer* opt, const int32_t* inputs, const int32_t* targets,
                      int64_t accum, int B, int T, const ScheduleValues& sched,
                      const StepOptions& o = {});

}  // namespace clm
