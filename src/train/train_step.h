// One training step, the only one: zero the gradients, forward and backward over the micro-batches
// of one optimizer step (gradient accumulation), with several ranks the average of the gradients
// over ranks (data parallelism), then the optimizer update. `train`, `profile` and `bench train`
// all call it, so what they time is the same computation.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "train/schedule.h"

namespace clm {

struct StepResult {
  double loss = 0;         // mean training loss over the micro-batches (nats)
  // The model's auxiliary losses by name (GPT::aux_losses), each the same mean as `loss`.
  std::vector<std::pair<std::string, double>> aux;
  float grad_norm = 0;     // global gradient norm before clipping (0 without an optimizer)
  double seconds = 0;      // device time of the whole step
  // Device time per phase, summed over micro-batches; only with StepOptions::phase_times (each
  // phase boundary then waits for the device).
  double forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0;
  // With several ranks: time inside collectives and their payload bytes during this step.
  double comm_seconds = 0, comm_bytes = 0;
};

struct StepOptions {
  bool phase_times = false;
  // Data parallelism: each rank passes its own micro-batches; gradients are summed over ranks in
  // buckets of `bucket_floats` over the contiguous gradient buffer (each rank's backward already
  // scales by 1 / (accum * world), so the sum is the average): all-reduced, or reduce-scattered to
  // their owners when the optimizer is sharded. Null or one rank: no communication.
  Comm* comm = nullptr;
  int64_t bucket_floats = int64_t(1) << 22;
};

// inputs/targets: `accum` micro-batches of B x T tokens, back to back, in host memory. opt may be
// null (forward and backward only). Throws NonFiniteError naming the micro-batch when a loss, or
// the gradient norm, is NaN or infinite; the weights are then unchanged by this step. With several
// ranks the loss is the mean over every rank's micro-batches and a non-finite loss on any rank
// throws on all of them (decided by one small all-reduce before the gradients move).
StepResult train_step(GPT& model, Optimizer* opt, const int32_t* inputs, const int32_t* targets,
                      int64_t accum, int B, int T, const ScheduleValues& sched,
                      const StepOptions& o = {});

}  // namespace clm
