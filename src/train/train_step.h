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
#include "train/step_graph.h"

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

// A single-process step queued on the device whose scalars have not been read (StepOptions::queued):
// what finish_step needs to turn them, once read, into the step's result.
struct QueuedStep {
  int64_t accum = 0;
  std::vector<GPT::LossCounts> counts;             // per micro-batch, the losses' divisors
  std::vector<std::pair<std::string, double>> aux;  // the auxiliary losses' names
  bool has_opt = false;
  double seconds = 0;                               // device time of the step
  // Device doubles a step of `accum` micro-batches writes: two loss sums per micro-batch, then
  // the optimizer's GradClip.
  static int64_t scalar_doubles(int64_t accum);
};

struct StepOptions {
  bool phase_times = false;
  // Single process only: the step writes its scalars (QueuedStep::scalar_doubles(accum) device
  // doubles) to `scalars` (null: the model's step_scalars) and, with `queued`, reads nothing: it
  // fills *queued and returns a result with only `seconds` set; finish_step completes it once the
  // caller has read the scalars. A non-finite step then skips its update on the device as usual,
  // but nothing throws until finish_step.
  double* scalars = nullptr;
  QueuedStep* queued = nullptr;
  // Data parallelism: each rank passes its own micro-batches; gradients are summed over ranks in
  // buckets of `bucket_floats` over the contiguous gradient buffer (each rank's backward already
  // scales by 1 / (accum * world), so the sum is the average): all-reduced, or reduce-scattered to
  // their owners when the optimizer is sharded. Null or one rank: no communication.
  Comm* comm = nullptr;
  int64_t bucket_floats = int64_t(1) << 22;
  // Single process, without phase_times: the step's ops go through this graph, which records
  // them once and replays them on later steps of the same shape where the backend can record
  // (train/step_graph.h). Null: queued op by op.
  StepGraph* graph = nullptr;
};

// inputs/targets: `accum` micro-batches of B x T tokens, back to back, in host memory. opt may be
// null (forward and backward only). Throws NonFiniteError naming the micro-batch when a loss, or
// the gradient norm, is NaN or infinite; the weights are then unchanged by this step. With several
// ranks the loss is the mean over every rank's micro-batches and a non-finite loss on any rank
// throws on all of them (decided by one small all-reduce before the gradients move).
StepResult train_step(GPT& model, Optimizer* opt, const int32_t* inputs, const int32_t* targets,
                      int64_t accum, int B, int T, const ScheduleValues& sched,
                      const StepOptions& o = {});

// The result of a queued step from `host`, a copy of its scalar_doubles(accum) device doubles.
// Returns "" when the step was applied, else what was not finite (the text train_step would have
// thrown), after taking the optimizer's step counts back (Optimizer::step_not_applied).
std::string finish_step(const QueuedStep& q, const double* host, Optimizer* opt, StepResult& r);

}  // namespace clm
