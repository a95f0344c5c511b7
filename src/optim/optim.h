// The optimizer over a model's parameters: AdamW and Muon groups routed by ParamKind, run on the
// parameters' backend (the moments live on the same device).
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "optim/optim_config.h"
#include "model/gpt.h"

namespace clm {

class Comm;

// Contiguous shares of a list of items for `world` ranks, balanced by cost: world + 1
// non-decreasing indices, rank r taking items [bounds[r], bounds[r+1]). Each boundary is placed
// where the running cost comes nearest to r / world of the total.
std::vector<size_t> partition_by_cost(const std::vector<double>& cost, int world);

struct OptimizerImpl;
// What Optimizer::newton_schulz_pass runs: its matrices, newton_schulz_many calls, distinct
// iterated shapes (ns_groups over all of them) and FLOPs (op_cost::newton_schulz each).
struct NsPassInfo {
  int matrices = 0, calls = 0, shapes = 0;
  double flops = 0;
};
struct Optimizer {
  // With `comm` of several ranks and optim.shard_state, the state is sharded (ZeRO-1): this rank
  // holds and updates the parameters [shard_bounds()[rank], shard_bounds()[rank+1]) of the flat
  // parameter/gradient layout, and step() ends by gathering every rank's updated parameters.
  Optimizer(std::vector<Param>& params, const OptimConfig& cfg, Comm* comm = nullptr);
  ~Optimizer();
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;
  // One update from the params' current grads, queued on the device without waiting for it.
  // lr_scale multiplies every group's lr (schedule), wd_scale every group's weight decay;
  // muon_momentum >= 0 overrides Muon's momentum (warmup). The global gradient norm before
  // clipping, the clip scale and whether the update happens are written to *clip (device memory)
  // and read there by the update ops: when the norm or any of checks[0..n_checks) (device
  // doubles, e.g. the step's summed losses) is not finite, nothing is updated, and the caller,
  // having read *clip, calls step_not_applied(). Sharded, the sums of squares make one trip
  // through the host (the communicator reduces host buffers).
  void enqueue_step(float lr_scale, float wd_scale, float muon_momentum, GradClip* clip,
                    const double* checks = nullptr, int n_checks = 0);
  // enqueue_step in two halves, so that the ops can be recorded and replayed (Backend::record):
  // stage_step writes this step's learning rates, weight decays, momentum and step counts to the
  // device (the update ops read them there); enqueue_ops queues the gradient norm, the clip and
  // the updates, with nothing moved between host and device when unsharded.
  void stage_step(float lr_scale, float wd_scale, float muon_momentum);
  void enqueue_ops(GradClip* clip, const double* checks = nullptr, int n_checks = 0);
  // The step counts (AdamW's bias corrections) taken back after an update that did not happen.
  void step_not_applied();
  // enqueue_step into the optimizer's own GradClip, then one read of it: returns the global
  // gradient norm before clipping. When it is not finite nothing is updated.
  float step(float lr_scale, float wd_scale = 1.0f, float muon_momentum = -1.0f);
  // Sharded only: every rank's gradients summed into the owners' ranges (a reduce-scatter over the
  // flat gradient buffer, in buckets of `bucket` floats); step() then reads only this rank's range.
  bool sharded() const;
  const std::vector<int64_t>& shard_bounds() const;  // world + 1 offsets into the flat layout
  void reduce_scatter_grads(int64_t bucket);
  // Collective with a sharded state: every rank's share copied to rank 0 (kept until the next
  // step), so that rank 0's save() writes the whole state, the same file as an unsharded
  // optimizer's. A no-op otherwise.
  void gather_state();
  std::string group_of(const std::string& param_name) const;  // "matrix" | "embed" | "head" | "scalar"
  // Builds the Newton-Schulz matmul primitives for every Muon shape (one-time JIT cost, kept out of
  // the training budget). Touches no parameter or optimizer state.
  void warmup();
  // Muon's Newton-Schulz of a step alone: every Muon group's batches, as step() issues them (one
  // newton_schulz_many each), on whatever the update scratch holds (zeros before the first step).
  // What `clocklm bench ns --config` times. Touches no parameter or optimizer state.
  void newton_schulz_pass();
  NsPassInfo newton_schulz_info() const;
  // Muon's Newton-Schulz as one newton_schulz_many call per batch of a group's matrices (the
  // default), or one newton_schulz call per matrix (the comparison the tests and benches make).
  // Call before warmup().
  void set_batched_ns(bool on);
  // The whole state (moments, step counts), whatever the sharding; load() keeps this rank's share,
  // so a checkpoint resumes with any number of ranks. Sharded: save() needs gather_state() first.
  void save(std::ostream& out) const;
  void load(std::istream& in);  // throws Error on mismatch
  void set_profiler(Profiler* p);
  std::unique_ptr<OptimizerImpl> impl;
};

}  // namespace clm
