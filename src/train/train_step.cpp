// The training step (see train_step.h). The device clock brackets the whole step; the optional
// phase clocks cost a device synchronisation at each boundary, so training does not use them.
//
// With several micro-batches each one's gradient is computed into a zeroed gradient buffer and
// added to a running sum, rather than accumulated inside backward: the sum of micro-batch
// gradients is then the same float additions, in the same order, as the sum over ranks of one
// micro-batch each, so one process with `world` micro-batches and `world` ranks with one train to
// the bit (tests/test_dist.cpp). The extra cost is one add over the gradients per micro-batch.
#include "train/train_step.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/fault.h"

namespace clm {


StepResult train_step(GPT& model, Optimizer* opt, const int32_t* inputs, const int32_t* targets,
                      int64_t accum, int B, int T, const ScheduleValues& sched, const StepOptions& o) {
  if (accum < 1) fail("train step: {} micro-batches (need at least 1)", accum);
  Backend& be = model.backend();
  Comm* comm = o.comm && o.comm->world() > 1 ? o.comm : nullptr;
  const int world = comm ? comm->world() : 1;
  const CommStats comm_before = comm ? comm->stats : CommStats{};
  std::unique_ptr<DeviceTimer> step_clock = be.timer(), phase = be.timer();
  StepResult r;
  step_clock->start();
  model.zero_grad();
  float* grads = model.grad_buffer();
  const int64_t n_grads = model.grad_floats();
  float* sum = accum > 1 ? model.grad_accumulator() : nullptr;
  double loss_sum = 0;
  // Sums of the auxiliary losses, by name; the names come from the config, the same on every rank.
  std::vector<std::pair<std::string, double>> aux = model.aux_losses();
  for (auto& e : aux) e.second = 0;
  std::string bad;  // the first non-finite loss of this rank
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
    if (!std::isfinite(loss)) {
      bad = fmt::format("loss is {} (micro-batch {})", loss, a);
      if (!comm) throw NonFiniteError(bad);
      break;  // the other ranks learn it below; nothing of this step is applied anywhere
    }
    if (o.phase_times) {
      r.forward_seconds += phase->stop();
      phase->start();
    }
    if (sum && a > 0) be.zero(grads, sizeof(float) * n_grads);
    model.backward(1.0f / float(accum * world));
    if (sum) {
      if (a == 0) be.copy(sum, grads, sizeof(float) * n_grads);
      else be.axpy(sum, 1.0f, grads, n_grads);
    }
    if (o.phase_times) r.backward_seconds += phase->stop();
    loss_sum += loss;
    const auto now = model.aux_losses();
    for (size_t i = 0; i < aux.size(); ++i) aux[i].second += now[i].second;
  }
  if (sum && bad.empty()) be.copy(grads, sum, sizeof(float) * n_grads);
  if (comm) {
    // One small all-reduce: the summed losses (main, then auxiliary) and whether any rank saw a
    // non-finite one. Every rank then throws, or averages the gradients, together.
    std::vector<double> v = {loss_sum, bad.empty() ? 0.0 : 1.0};
    for (const auto& e : aux) v.push_back(e.second);
    comm->all_reduce(v.data(), int64_t(v.size()), ReduceOp::Sum);
    if (v[1] > 0) {
      const int at = int(comm->max(bad.empty() ? -1.0 : double(comm->rank())));  // collective too
      throw NonFiniteError(fmt::format("loss is not finite on rank {}{}", at,
                                       v[1] > 1 ? fmt::format(" (and {} other ranks)", int(v[1]) - 1) : ""));
    }
    loss_sum = v[0];
    for (size_t i = 0; i < aux.size(); ++i) aux[i].second = v[2 + i];
    // A GPU transport runs on its own stream: the gradients must be complete before it reads them.
    // (A no-op on the CPU; one wait per step on a GPU, only with several ranks.)
    be.synchronize();
    // ZeRO-1: each rank needs the sum of its own share only (the optimizer gathers the updated
    // parameters); otherwise every rank gets the whole sum.
    if (opt && opt->sharded()) opt->reduce_scatter_grads(o.bucket_floats);
    else comm->all_reduce_buckets(grads, n_grads, o.bucket_floats);
  }
  r.loss = loss_sum / double(accum * world);
  for (const auto& [name, sum_] : aux) r.aux.emplace_back(name, sum_ / double(accum * world));
  if (opt) {
    if (o.phase_times) phase->start();
    r.grad_norm = opt->step(sched.lr_scale, sched.wd_scale, sched.muon_momentum);
    if (o.phase_times) r.optimizer_seconds = phase->stop();
    if (!std::isfinite(r.grad_norm)) throw NonFiniteError(fmt::format("gradient norm is {}", r.grad_norm));
  }
  r.seconds = step_clock->stop();
  if (comm) {
    r.comm_seconds = comm->stats.seconds - comm_before.seconds;
    r.comm_bytes = comm->stats.bytes - comm_before.bytes;
  }
  return r;
}

}  // namespace clm
