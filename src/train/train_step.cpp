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
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/fault.h"
#include "train/step_graph.h"

namespace clm {


namespace {

// The step's scalars in one device block, so that the host reads them once, at the step's end:
// per micro-batch its two loss sums (GPT::forward_deferred), then the optimizer's GradClip.
struct StepScalars {
  double* d;
  int64_t accum;
  double* sums(int64_t a) const { return d + 2 * a; }
  GradClip* clip() const { return reinterpret_cast<GradClip*>(d + 2 * accum); }
  static int64_t doubles(int64_t accum) { return 2 * accum + int64_t(sizeof(GradClip) / 8); }
};

// The first micro-batch whose loss (or multi-token loss) is not finite, as the error names it;
// "" when all are finite. Adds the finite means to loss_sum and aux in micro-batch order.
std::string add_losses(const double* host, const std::vector<GPT::LossCounts>& counts,
                       double& loss_sum, std::vector<std::pair<std::string, double>>& aux) {
  for (size_t a = 0; a < counts.size(); ++a) {
    const auto [loss, mtp] = GPT::loss_means(host + 2 * a, counts[a]);
    if (!std::isfinite(loss) || !std::isfinite(mtp))
      return fmt::format("loss is {} (micro-batch {})", std::isfinite(loss) ? mtp : loss, a);
    loss_sum += loss;
    if (!aux.empty()) aux[0].second += mtp;  // the one auxiliary loss, the multi-token head's
  }
  return "";
}

// The micro-batches' forwards and backwards, from their staged slots, into the gradient buffer
// (their sum, scaled by 1 / (accum world)). With `phase`, each phase is timed (and waited for).
void queue_micro_batches(GPT& model, const std::vector<GPT::LossCounts>& counts, int world,
                         const StepScalars& sc, DeviceTimer* phase, StepResult& r) {
  Backend& be = model.backend();
  const int64_t accum = int64_t(counts.size());
  model.zero_grad();
  float* grads = model.grad_buffer();
  const int64_t n_grads = model.grad_floats();
  float* sum = accum > 1 ? model.grad_accumulator() : nullptr;
  // Nothing is read from the device in this loop: the losses stay in their device sums.
  for (int64_t a = 0; a < accum; ++a) {
    if (phase) phase->start();
    model.forward_staged(a, counts[size_t(a)], sc.sums(a));
    if (phase) {
      r.forward_seconds += phase->stop();
      phase->start();
    }
    if (sum && a > 0) be.zero(grads, sizeof(float) * n_grads);
    model.backward(1.0f / float(accum * world));
    if (sum) {
      if (a == 0) be.copy(sum, grads, sizeof(float) * n_grads);
      else be.axpy(sum, 1.0f, grads, n_grads);
    }
    if (phase) r.backward_seconds += phase->stop();
  }
  if (sum) be.copy(grads, sum, sizeof(float) * n_grads);
}

// The gradient clip from a host copy of a step's scalars: sets r.grad_norm; returns "" when the
// update happened, else what was not finite.
std::string read_clip(const double* host, int64_t accum, StepResult& r) {
  GradClip clip;
  std::memcpy(&clip, host + 2 * accum, sizeof(clip));
  r.grad_norm = clip.norm;
  return clip.finite ? "" : fmt::format("gradient norm is {}", r.grad_norm);
}

// The optimizer's update of the step (gradient norm, clip, updates), timed with `phase`. The update
// happens on the device only if the gradient norm and every loss sum are finite.
void queue_update(Optimizer& opt, const StepScalars& sc, DeviceTimer* phase, StepResult& r) {
  if (phase) phase->start();
  opt.enqueue_ops(sc.clip(), sc.d, int(2 * sc.accum));
  if (phase) r.optimizer_seconds = phase->stop();
}

StepKey step_key(const GPT& model, const Optimizer* opt, const std::vector<GPT::LossCounts>& counts, int B, int T,
                 const double* scalars) {
  StepKey k{.memory_epoch = model.memory_epoch(), .B = B, .T = T, .scalars = scalars, .opt = opt, .counts = {}};
  for (const auto& c : counts) k.counts.emplace_back(c.valid, c.mtp_valid);
  return k;
}

}  // namespace

int64_t QueuedStep::scalar_doubles(int64_t accum) { return StepScalars::doubles(accum); }

std::string finish_step(const QueuedStep& q, const double* host, Optimizer* opt, StepResult& r) {
  double loss_sum = 0;
  std::vector<std::pair<std::string, double>> aux = q.aux;
  for (auto& e : aux) e.second = 0;
  std::string bad = add_losses(host, q.counts, loss_sum, aux);
  if (bad.empty()) {
    r.loss = loss_sum / double(q.accum);
    r.aux.clear();
    for (const auto& [name, sum] : aux) r.aux.emplace_back(name, sum / double(q.accum));
  }
  if (q.has_opt) {
    const std::string clip_bad = read_clip(host, q.accum, r);
    if (bad.empty()) bad = clip_bad;
  }
  // grad_clip checked the same losses on the device: a non-finite one skipped the update there.
  if (!bad.empty() && opt) opt->step_not_applied();
  return bad;
}

StepResult train_step(GPT& model, Optimizer* opt, const int32_t* inputs, const int32_t* targets,
                      int64_t accum, int B, int T, const ScheduleValues& sched, const StepOptions& o) {
  if (accum < 1) fail("train step: {} micro-batches (need at least 1)", accum);
  Backend& be = model.backend();
  Comm* comm = o.comm && o.comm->world() > 1 ? o.comm : nullptr;
  const int world = comm ? comm->world() : 1;
  const CommStats comm_before = comm ? comm->stats : CommStats{};
  if (o.queued && comm) fail("train step: only a single-process step can leave its scalars unread");
  // The phase clock only when asked: a step otherwise asks the backend for one timer.
  std::unique_ptr<DeviceTimer> step_clock = be.timer(), phase = o.phase_times ? be.timer() : nullptr;
  StepResult r;
  step_clock->start();
  const bool injected_nan = fault_nan_loss();  // asked once per step: the fault counts the calls
  if (injected_nan && !comm) throw NonFiniteError("loss is nan (micro-batch 0)");
  // Host to device first: every micro-batch's tokens and the optimizer's hyperparameters, and
  // every buffer the step uses allocated, so that the ops below move nothing between host and
  // device and can be recorded (StepOptions::graph).
  // A recorded step writes its scalars to the model's own block (a fixed place) and they are
  // copied to o.scalars after it, since o.scalars moves from step to step (a StepWindow's slices).
  const bool recorded = o.graph && !o.phase_times && !comm && o.graph->active(be);
  const StepScalars sc{o.scalars && !recorded ? o.scalars : model.step_scalars(StepScalars::doubles(accum)), accum};
  double* const scalars_out = o.scalars ? o.scalars : sc.d;
  std::vector<GPT::LossCounts> counts;
  const int64_t micro = int64_t(B) * T;
  for (int64_t a = 0; a < accum; ++a)
    counts.push_back(model.stage_batch(a, inputs + a * micro, targets + a * micro, B, T));
  if (accum > 1) model.grad_accumulator();
  if (opt) opt->stage_step(sched.lr_scale, sched.wd_scale, sched.muon_momentum);
  double loss_sum = 0;
  // Sums of the auxiliary losses, by name; the names come from the config, the same on every rank.
  std::vector<std::pair<std::string, double>> aux = model.aux_losses();
  for (auto& e : aux) e.second = 0;
  std::vector<double> host(size_t(StepScalars::doubles(accum)));
  if (!comm) {
    // The whole step as ops on the device: recorded and replayed when the graph is on.
    const auto issue = [&] {
      queue_micro_batches(model, counts, 1, sc, phase.get(), r);
      if (opt) queue_update(*opt, sc, phase.get(), r);
    };
    if (recorded) o.graph->run(be, step_key(model, opt, counts, B, T, sc.d), issue);
    else issue();
    if (scalars_out != sc.d) be.copy(scalars_out, sc.d, sizeof(double) * host.size());
  } else {
    queue_micro_batches(model, counts, world, sc, phase.get(), r);
    float* grads = model.grad_buffer();
    const int64_t n_grads = model.grad_floats();
    // Several ranks: the losses are read before the gradients move (the one read of a
    // data-parallel step besides the sharded optimizer's; the communicator reduces host buffers).
    // One small all-reduce: the summed losses (main, then auxiliary) and whether any rank saw a
    // non-finite one. Every rank then throws, or averages the gradients, together.
    be.to_host(host.data(), sc.d, sizeof(double) * 2 * size_t(accum));
    std::string bad = add_losses(host.data(), counts, loss_sum, aux);
    if (injected_nan && bad.empty()) bad = "loss is nan (micro-batch 0)";
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
    if (opt) queue_update(*opt, sc, phase.get(), r);
  }
  if (!comm) {
    QueuedStep q{.accum = accum, .counts = std::move(counts), .aux = std::move(aux), .has_opt = opt != nullptr};
    if (o.queued) {  // the caller reads the scalars later, with other steps'
      r.seconds = step_clock->stop();
      *o.queued = std::move(q);
      return r;
    }
    // The step's one read (single process): every loss sum and the gradient clip together.
    be.to_host(host.data(), scalars_out, sizeof(double) * host.size());
    const std::string bad = finish_step(q, host.data(), opt, r);
    if (!bad.empty()) throw NonFiniteError(bad);
  } else {
    // The step's second read: the gradient clip (the losses were summed over the ranks above).
    be.to_host(host.data(), sc.d, sizeof(double) * host.size());
    r.loss = loss_sum / double(accum * world);
    for (const auto& [name, sum_] : aux) r.aux.emplace_back(name, sum_ / double(accum * world));
    if (opt) {
      const std::string bad = read_clip(host.data(), accum, r);
      if (!bad.empty()) {
        opt->step_not_applied();
        throw NonFiniteError(bad);
      }
    }
  }
  r.seconds = step_clock->stop();
  if (comm) {
    r.comm_seconds = comm->stats.seconds - comm_before.seconds;
    r.comm_bytes = comm->stats.bytes - comm_before.bytes;
  }
  return r;
}

}  // namespace clm
