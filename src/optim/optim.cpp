// The optimizer, written against the device interface: routes each parameter to its group by ParamKind (Matrix -> optim.matrix, Embedding ->
// optim.embed, Head -> optim.head, Scalar -> optim.scalar), clips by the global gradient norm, then
// runs AdamW or Muon per group. State (moments, Muon momentum) lives in one allocation; save/load
// write it with the parameter names and sizes so a mismatched checkpoint is refused.
//
// Sharded (ZeRO-1, several ranks): the parameters are cut into contiguous shares of the flat
// parameter/gradient layout, one per rank, balanced by the estimated cost of their updates (Muon's
// Newton-Schulz dominates), so each Muon matrix is orthogonalised once, by its owner. A rank
// allocates state for its share only, updates it from its reduce-scattered gradients, and the
// parameters are then all-gathered. The gradient norm is combined from per-parameter partial sums
// in parameter order, so it is the unsharded norm to the bit; with two ranks each gradient element
// is the same two-term sum either way, so sharded training equals unsharded training bit for bit.
//
// Muon per group: the momentum of every owned matrix into its own slice of one scratch buffer,
// then one newton_schulz_many over all of them (a backend can orthogonalise many small matrices
// side by side, which one-at-a-time calls would leave it no room to do), then NorMuon and the
// update per matrix. Groups too large for one scratch buffer go in batches (kMuonBatchFloats).
#include "optim/optim.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstring>
#include <istream>
#include <iterator>
#include <ostream>

#include "backend/backend.h"
#include "backend/ns_groups.h"
#include "core/common.h"
#include "backend/profiled_backend.h"
#include "core/profiler.h"
#include "dist/comm.h"
#include "optim/optim_state.h"

namespace clm {

namespace {

const char* const kGroupNames[4] = {"matrix", "embed", "head", "scalar"};

int group_index(ParamKind k) {
  switch (k) {
    case ParamKind::Matrix: return 0;
    case ParamKind::Embedding: return 1;
    case ParamKind::Head: return 2;
    default: return 3;
  }
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

constexpr const char* kStateMagic = kOptimStateMagic;

// Relative cost of one parameter's update, for balancing shares between ranks: Newton-Schulz
// FLOPs plus memory traffic weighted by a matmul-rate-to-bandwidth ratio typical of a CPU (tens of
// FLOPs per byte; a GPU's is higher). Only the balance depends on it, never the result.
constexpr double kFlopsPerByte = 50;

// Floats of Muon update a batch holds at most (unless one matrix alone is larger): the scratch is
// two such buffers, so a small model's whole group fits in one batch while a large model's
// scratch stays a bounded fraction of its memory.
constexpr int64_t kMuonBatchFloats = int64_t(1) << 24;

}  // namespace

std::vector<size_t> partition_by_cost(const std::vector<double>& cost, int world) {
  if (world < 1) fail("partition: {} ranks", world);
  std::vector<double> prefix(cost.size() + 1, 0.0);
  for (size_t i = 0; i < cost.size(); ++i) prefix[i + 1] = prefix[i] + cost[i];
  std::vector<size_t> b(size_t(world) + 1, 0);
  b[size_t(world)] = cost.size();
  for (int r = 1; r < world; ++r) {
    const double target = prefix.back() * double(r) / double(world);
    size_t i = size_t(std::lower_bound(prefix.begin(), prefix.end(), target) - prefix.begin());
    if (i > 0 && target - prefix[i - 1] <= prefix[std::min(i, cost.size())] - target) --i;
    b[size_t(r)] = std::clamp(i, b[size_t(r) - 1], cost.size());
  }
  return b;
}

struct OptState {
  Param* p;
  int group;          // index into groups
  bool muon;
  bool normuon = false;  // Muon with NorMuon's per-row second moments (v holds `rows` of them)
  int64_t n, rows, cols;
  bool owned = true;   // this rank updates it (always, unsharded)
  int64_t flat = 0;    // offset of p->data (and p->grad) in the flat layout (sharded)
  int64_t soff = 0;    // offset of its moments in the whole (unsharded) state
  float* m = nullptr;  // AdamW first moment / Muon momentum buffer (owned only)
  float* v = nullptr;  // AdamW second moment; NorMuon's per-row second moments
};

// Floats of optimizer state a parameter keeps: AdamW m and v, Muon its momentum, NorMuon also one
// second moment per row.
static int64_t state_floats(const OptState& st) {
  return st.muon ? st.n + (st.normuon ? st.rows : 0) : 2 * st.n;
}

struct OptimizerImpl {
  // While a profiler is attached, be points at this decorator over `device` (set_profiler); kept
  // for the optimizer's lifetime, before every buffer, since buffers may be allocated through it.
  std::unique_ptr<ProfiledBackend> profiled;
  Backend* device = nullptr;
  Backend* be = nullptr;
  OptimConfig cfg;
  MatPrec ns_prec[4] = {MatPrec::BF16, MatPrec::BF16, MatPrec::BF16, MatPrec::BF16};
  NsSchedule ns_sched[4];          // Muon groups' Newton-Schulz coefficients
  const OptimGroup* groups[4];
  std::vector<OptState> states;
  DeviceBuffer storage;            // all moments, one device allocation
  int64_t storage_n = 0;           // floats in storage
  DeviceBuffer scratch_u, scratch_o;  // Muon: momentum-mixed updates, their orthogonalisations
  // Per group, the owned Muon states (indices into states) in batches; each batch's updates lie
  // side by side in the scratch buffers, in this order.
  std::vector<std::vector<size_t>> muon_batches[4];
  bool ns_batched = true;          // one newton_schulz_many per batch, else one newton_schulz each
  int64_t t[4] = {0, 0, 0, 0};     // steps taken per group (AdamW bias correction)
  bool has[4] = {false, false, false, false};  // the group has parameters
  // The step's scalars in device memory: the per-parameter sums of squares (doubles, parameter
  // order), each group's GroupStep, and the GradClip that step() reads back.
  DeviceBuffer scalars;
  double* part_d() const { return scalars.as<double>(); }
  GroupStep* group_step_d() const { return reinterpret_cast<GroupStep*>(part_d() + states.size()); }
  GradClip* own_clip_d() const { return reinterpret_cast<GradClip*>(group_step_d() + 4); }
  size_t first_owned = 0, n_owned = 0;  // the owned states, a contiguous run in parameter order
  Profiler* prof = nullptr;

  // Sharding (ZeRO-1). The whole state is laid out as unsharded (m, then v for AdamW, in state
  // order); this rank's storage is the slice [state_bounds[rank], state_bounds[rank+1]) of it.
  Comm* comm = nullptr;
  bool sharded = false;
  float* pbase = nullptr;          // the flat parameter layout (first parameter's data)
  float* gbase = nullptr;          // ... and gradient layout
  std::vector<int64_t> bounds;     // flat offsets of each rank's share, world + 1
  std::vector<int64_t> state_bounds;  // the same shares as offsets into the whole state
  int64_t bucket = int64_t(1) << 22;  // floats per collective call
  std::vector<float> gathered;     // the whole state after gather_state()
  bool gathered_fresh = false;     // no step since gather_state()

  // A batch's matrices laid out in the scratch buffers: update u[j] and its orthogonalisation o[j]
  // for batch[j], at the same offset in scratch_u and scratch_o.
  struct MuonBatch {
    std::vector<const float*> g;  // u as the op's inputs
    std::vector<float*> u, o;
    std::vector<int64_t> rows, cols;
    int64_t total = 0;  // floats
    NewtonSchulzManyArgs args(const NsSchedule& sched, MatPrec prec) const {
      return {.count = int(u.size()), .G = g.data(), .out = o.data(), .rows = rows.data(), .cols = cols.data(),
              .sched = &sched, .prec = prec};
    }
  };
  MuonBatch muon_batch(const std::vector<size_t>& batch) const {
    MuonBatch mb;
    for (size_t i : batch) {
      const OptState& st = states[i];
      mb.u.push_back(scratch_u.as<float>() + mb.total);
      mb.g.push_back(mb.u.back());
      mb.o.push_back(scratch_o.as<float>() + mb.total);
      mb.rows.push_back(st.rows);
      mb.cols.push_back(st.cols);
      mb.total += st.n;
    }
    return mb;
  }

  void grad_sums();
  void write_group_steps(float lr_scale, float wd_scale, float muon_momentum);
  void adamw_group(int gi, const GradClip* clip);
  void muon_group(int gi, const GradClip* clip);

  int64_t own_state_begin() const { return sharded ? state_bounds[size_t(comm->rank())] : 0; }

  // Points each owned state's moments into `storage` at its offset in the whole state minus this
  // rank's start (so unsharded, the whole state in order).
  void bind_storage() {
    float* base = storage.as<float>() - own_state_begin();
    for (OptState& st : states) {
      if (!st.owned) continue;
      st.m = base + st.soff;
      st.v = st.muon && !st.normuon ? nullptr : base + st.soff + st.n;
    }
  }
};

Optimizer::Optimizer(std::vector<Param>& params, const OptimConfig& cfg, Comm* comm)
    : impl(std::make_unique<OptimizerImpl>()) {
  OptimizerImpl& s = *impl;
  s.cfg = cfg;
  s.groups[0] = &s.cfg.matrix;
  s.groups[1] = &s.cfg.embed;
  s.groups[2] = &s.cfg.head;
  s.groups[3] = &s.cfg.scalar;
  if (params.empty()) fail("optimizer: the model has no parameters");
  s.be = params.front().backend;
  if (!s.be) fail("optimizer: parameter '{}' is not on a device", params.front().name);
  for (int gi = 0; gi < 4; ++gi) {
    s.ns_prec[gi] = resolve_precision(s.groups[gi]->ns_precision, *s.be);
    s.ns_sched[gi] = ns_schedule(s.groups[gi]->ns_coeffs, s.groups[gi]->ns_steps);
  }
  int64_t total = 0, max_muon = 0;
  for (Param& p : params) {
    if (p.backend != s.be) fail("optimizer: parameter '{}' is on another device", p.name);
    OptState st;
    st.p = &p;
    st.group = group_index(p.kind);
    const OptimGroup& g = *s.groups[st.group];
    if (g.kind != "adamw" && g.kind != "muon" && g.kind != "normuon")
      fail("optim.{}.kind '{}' is unknown (adamw, muon, normuon)", kGroupNames[st.group], g.kind);
    st.muon = g.kind != "adamw";
    st.normuon = g.kind == "normuon";
    st.n = numel_of(p.shape);
    if (st.muon) {
      if (p.shape.size() < 2)
        fail("parameter '{}' is {}-D but optim.{}.kind is {} (Muon needs a matrix)", p.name, p.shape.size(),
             kGroupNames[st.group], g.kind);
      st.rows = p.shape[0];
      st.cols = st.n / st.rows;  // trailing dimensions flattened
      max_muon = std::max(max_muon, st.n);
    } else {
      st.rows = 1;
      st.cols = st.n;
    }
    s.states.push_back(st);
  }
  for (OptState& st : s.states) {  // the whole state, in parameter order
    st.soff = total;
    total += state_floats(st);
  }
  s.storage_n = total;
  if (comm && comm->world() > 1 && cfg.shard_state) {
    // The flat layout: every parameter at the same offset from the first in the data and in the
    // gradient allocation, in increasing order (GPT carves them so).
    s.comm = comm;
    s.sharded = true;
    s.pbase = params.front().data;
    s.gbase = params.front().grad;
    int64_t end = 0;
    for (OptState& st : s.states) {
      st.flat = st.p->data - s.pbase;
      if (st.flat < end || st.p->grad - s.gbase != st.flat)
        fail("optimizer: parameter '{}' is not in one flat layout with the others; sharding needs one", st.p->name);
      end = st.flat + st.n;
    }
    std::vector<double> cost;
    for (const OptState& st : s.states) {
      const double bytes = 28.0 * double(st.n);  // AdamW: p, g, m, v in, p, m, v out; Muon alike
      const double ns = st.muon ? op_cost::newton_schulz(st.rows, st.cols, s.groups[st.group]->ns_steps,
                                                         MatPrec::F32).flops
                                : 0.0;
      cost.push_back(ns + kFlopsPerByte * bytes);
    }
    const int world = comm->world(), rank = comm->rank();
    const std::vector<size_t> share = partition_by_cost(cost, world);
    for (int r = 0; r <= world; ++r) {
      const size_t i = share[size_t(r)];
      s.bounds.push_back(r == 0 ? 0 : i < s.states.size() ? s.states[i].flat : end);
      s.state_bounds.push_back(i < s.states.size() ? s.states[i].soff : total);
    }
    max_muon = 0;
    for (size_t i = 0; i < s.states.size(); ++i) {
      OptState& st = s.states[i];
      st.owned = i >= share[size_t(rank)] && i < share[size_t(rank) + 1];
      if (st.owned && st.muon) max_muon = std::max(max_muon, st.n);
    }
    total = s.state_bounds[size_t(rank) + 1] - s.state_bounds[size_t(rank)];
  }
  s.storage = DeviceBuffer(*s.be, size_t(std::max<int64_t>(total, 1)) * 4);
  s.bind_storage();
  // Batches in parameter order, cut where the next matrix would pass the cap.
  const int64_t cap = std::max(max_muon, kMuonBatchFloats);
  int64_t scratch = 1;
  for (int gi = 0; gi < 4; ++gi) {
    int64_t fill = 0;
    for (size_t i = 0; i < s.states.size(); ++i) {
      const OptState& st = s.states[i];
      if (st.group != gi || !st.muon || !st.owned) continue;
      auto& b = s.muon_batches[gi];
      if (b.empty() || fill + st.n > cap) {
        b.emplace_back();
        fill = 0;
      }
      b.back().push_back(i);
      fill += st.n;
      scratch = std::max(scratch, fill);
    }
  }
  s.scratch_u = DeviceBuffer(*s.be, size_t(scratch) * 4);
  s.scratch_o = DeviceBuffer(*s.be, size_t(scratch) * 4);
  static_assert(sizeof(GroupStep) % 8 == 0 && sizeof(GradClip) % 8 == 0);
  s.scalars = DeviceBuffer(*s.be, 8 * s.states.size() + 4 * sizeof(GroupStep) + sizeof(GradClip));
  for (size_t i = 0; i < s.states.size(); ++i) {
    const OptState& st = s.states[i];
    s.has[st.group] = true;
    if (!st.owned) continue;
    if (s.n_owned == 0) s.first_owned = i;
    if (i != s.first_owned + s.n_owned) fail("optimizer: this rank's parameters are not contiguous");
    ++s.n_owned;
  }
}

void Optimizer::set_batched_ns(bool on) { impl->ns_batched = on; }

bool Optimizer::sharded() const { return impl->sharded; }
const std::vector<int64_t>& Optimizer::shard_bounds() const { return impl->bounds; }

void Optimizer::reduce_scatter_grads(int64_t bucket) {
  OptimizerImpl& s = *impl;
  if (!s.sharded) fail("optimizer: reduce_scatter_grads on an unsharded optimizer");
  s.be->synchronize();  // the gradients are complete before another stream (NCCL's) reads them
  s.comm->reduce_scatter_buckets(s.gbase, s.bounds, bucket);
}

void Optimizer::gather_state() {
  OptimizerImpl& s = *impl;
  if (!s.sharded) return;
  // Through a bucket-sized device buffer, so the device never holds the whole state.
  const int rank = s.comm->rank();
  const int64_t mine0 = s.state_bounds[size_t(rank)];
  DeviceBuffer stage(*s.be, size_t(std::min(s.bucket, std::max<int64_t>(s.storage_n, 1))) * 4);
  if (rank == 0) s.gathered.assign(size_t(s.storage_n), 0.0f);
  for_each_sharded_bucket(s.state_bounds, s.comm->world(), s.bucket, [&](int64_t off, const std::vector<int64_t>& c) {
    int64_t n = 0, lo = 0;  // this bucket's length and where this rank's piece starts in it
    for (int r = 0; r < int(c.size()); ++r) {
      if (r == rank) lo = n;
      n += c[size_t(r)];
    }
    if (c[size_t(rank)] > 0) {
      const int64_t from = std::max(off, mine0) - mine0;
      s.be->copy(stage.as<float>() + lo, s.storage.as<float>() + from, sizeof(float) * c[size_t(rank)]);
    }
    s.comm->all_gather(stage.as<float>(), c);
    if (rank == 0) s.be->to_host(s.gathered.data() + off, stage.as<float>(), sizeof(float) * n);
  });
  s.gathered_fresh = true;
}

Optimizer::~Optimizer() = default;
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;

// With a profiler the optimizer issues its ops through a ProfiledBackend over its device, which
// times each under the ProfRegion that step() opens around it; without one, straight to the device.
void Optimizer::set_profiler(Profiler* p) {
  OptimizerImpl& s = *impl;
  if (!s.device) s.device = s.be;
  s.prof = p;
  if (p && s.profiled) s.profiled->attach(*p);
  if (p && !s.profiled) s.profiled = std::make_unique<ProfiledBackend>(*s.device, *p);
  s.be = p ? s.profiled.get() : s.device;
  if (p && !s.device->host_visible()) {  // the all-gather scope waits for the device too
    p->wait = [](void* be) { static_cast<Backend*>(be)->synchronize(); };
    p->wait_ctx = s.device;
  }
}

std::string Optimizer::group_of(const std::string& param_name) const {
  for (const OptState& st : impl->states)
    if (st.p->name == param_name) return kGroupNames[st.group];
  fail("optimizer: no parameter named '{}'", param_name);
}

void Optimizer::warmup() {
  OptimizerImpl& s = *impl;
  if (s.ns_batched) {
    // The batches step() will run, on zeros: a backend that deals a batch's matrices to threads
    // deals them the same way each time, so each thread builds the primitives it will use; one
    // that stacks them sizes its iteration buffers for the largest stack here.
    s.be->zero(s.scratch_u.as<float>(), s.scratch_u.bytes());
    newton_schulz_pass();
    return;
  }
  std::vector<std::tuple<int64_t, int64_t, int, std::string, MatPrec>> done;
  for (const OptState& st : s.states) {
    if (!st.muon || !st.owned) continue;
    const OptimGroup& g = *s.groups[st.group];
    auto key = std::make_tuple(st.rows, st.cols, g.ns_steps, g.ns_coeffs, s.ns_prec[st.group]);
    if (std::find(done.begin(), done.end(), key) != done.end()) continue;
    done.push_back(key);
    s.be->zero(s.scratch_u.as<float>(), sizeof(float) * st.n);
    s.be->newton_schulz(s.scratch_u.as<float>(), s.scratch_o.as<float>(), st.rows, st.cols,
                        s.ns_sched[st.group], s.ns_prec[st.group]);
  }
}

void Optimizer::newton_schulz_pass() {
  OptimizerImpl& s = *impl;
  for (int gi = 0; gi < 4; ++gi)
    for (const std::vector<size_t>& batch : s.muon_batches[gi])
      s.be->newton_schulz_many(s.muon_batch(batch).args(s.ns_sched[gi], s.ns_prec[gi]));
}

NsPassInfo Optimizer::newton_schulz_info() const {
  const OptimizerImpl& s = *impl;
  NsPassInfo info;
  std::vector<int64_t> rows, cols;
  for (int gi = 0; gi < 4; ++gi)
    for (const std::vector<size_t>& batch : s.muon_batches[gi]) {
      ++info.calls;
      for (size_t i : batch) {
        const OptState& st = s.states[i];
        rows.push_back(st.rows);
        cols.push_back(st.cols);
        info.flops += op_cost::newton_schulz(st.rows, st.cols, s.groups[gi]->ns_steps, s.ns_prec[gi]).flops;
      }
    }
  info.matrices = int(rows.size());
  info.shapes = int(ns_groups(rows.data(), cols.data(), info.matrices).size());
  return info;
}

float Optimizer::step(float lr_scale, float wd_scale, float muon_momentum) {
  OptimizerImpl& s = *impl;
  enqueue_step(lr_scale, wd_scale, muon_momentum, s.own_clip_d());
  GradClip clip;
  s.be->to_host(&clip, s.own_clip_d(), sizeof(clip));
  if (!clip.finite) step_not_applied();
  return clip.norm;
}

void Optimizer::step_not_applied() {
  for (int gi = 0; gi < 4; ++gi)
    if (impl->has[gi]) --impl->t[gi];
}

// The sums of squares of the owned gradients into their slots of part_d (parameter order), one
// call for all of them. Sharded: the other ranks' slots are zeros before the all-reduce, which
// then combines them exactly (every other rank adds +0.0), so the norm is the unsharded one.
void OptimizerImpl::grad_sums() {
  std::vector<const float*> xs;
  std::vector<int64_t> ns;
  for (size_t i = first_owned; i < first_owned + n_owned; ++i) {
    xs.push_back(states[i].p->grad);
    ns.push_back(states[i].n);
  }
  if (sharded) be->zero(part_d(), 8 * states.size());
  be->sum_squares_many(xs.data(), ns.data(), int(xs.size()), part_d() + first_owned);
  if (sharded) {
    // The communicator reduces host buffers of doubles: the one read inside a sharded step.
    std::vector<double> part(states.size());
    be->to_host(part.data(), part_d(), 8 * part.size());
    comm->all_reduce(part.data(), int64_t(part.size()), ReduceOp::Sum);
    be->to_device(part_d(), part.data(), 8 * part.size());
  }
}

// Each group's learning rate, weight decay, momentum and step count for this step, to the device
// (the update ops read them there). The counts advance here; step_not_applied() takes them back.
void OptimizerImpl::write_group_steps(float lr_scale, float wd_scale, float muon_momentum) {
  GroupStep gs[4];
  for (int gi = 0; gi < 4; ++gi) {
    if (!has[gi]) continue;
    const OptimGroup& g = *groups[gi];
    gs[gi] = {.lr = g.lr * lr_scale, .wd = g.weight_decay * wd_scale,
              .mu = muon_momentum >= 0 ? muon_momentum : g.momentum, .t = ++t[gi]};
  }
  be->to_device(group_step_d(), gs, sizeof(gs));
}

void Optimizer::enqueue_step(float lr_scale, float wd_scale, float muon_momentum, GradClip* clip,
                             const double* checks, int n_checks) {
  stage_step(lr_scale, wd_scale, muon_momentum);
  enqueue_ops(clip, checks, n_checks);
}

void Optimizer::stage_step(float lr_scale, float wd_scale, float muon_momentum) {
  OptimizerImpl& s = *impl;
  s.gathered_fresh = false;
  std::vector<float>().swap(s.gathered);
  s.write_group_steps(lr_scale, wd_scale, muon_momentum);
}

void Optimizer::enqueue_ops(GradClip* clip, const double* checks, int n_checks) {
  OptimizerImpl& s = *impl;
  {
    ProfRegion pr(s.prof, "optim.grad_norm", "optim");
    s.grad_sums();
    s.be->grad_clip({.count = int(s.states.size()), .part = s.part_d(), .max_norm = s.cfg.grad_clip,
                     .checks = checks, .n_checks = n_checks, .out = clip});
  }
  for (int gi = 0; gi < 4; ++gi) {
    if (!s.has[gi]) continue;
    if (s.groups[gi]->kind == "adamw") s.adamw_group(gi, clip);
    else s.muon_group(gi, clip);
  }
  if (s.sharded) {
    // Communication, not a backend op: timed here. A skipped update gathers unchanged parameters.
    ProfScope ps(s.prof, "optim.all_gather", "optim", 0.0, 4.0 * double(s.bounds.back()));
    s.be->synchronize();  // the updates are done before another stream (NCCL's) reads them
    s.comm->all_gather_buckets(s.pbase, s.bounds, s.bucket);
  }
}

void OptimizerImpl::adamw_group(int gi, const GradClip* clip) {
  static const char* const kAdamNames[4] = {"adamw.matrix", "adamw.embed", "adamw.head", "adamw.scalar"};
  ProfRegion pr(prof, kAdamNames[gi], "optim");
  const OptimGroup& g = *groups[gi];
  const AdamWHyper hyper{.beta1 = g.beta1, .beta2 = g.beta2, .eps = g.eps, .cautious = g.cautious_wd};
  for (const OptState& st : states)
    if (st.group == gi && st.owned)
      be->adamw_update({.n = st.n, .p = st.p->data, .grad = st.p->grad, .clip = clip,
                        .step = group_step_d() + gi, .m = st.m, .v = st.v, .hyper = hyper});
}

void OptimizerImpl::muon_group(int gi, const GradClip* clip) {
  const OptimGroup& g = *groups[gi];
  const GroupStep* gs = group_step_d() + gi;
  for (const std::vector<size_t>& batch : muon_batches[gi]) {
    const auto mb = muon_batch(batch);
    {
      ProfRegion pr(prof, "muon.momentum", "optim");
      for (size_t j = 0; j < batch.size(); ++j) {
        const OptState& st = states[batch[j]];
        be->muon_momentum({.n = st.n, .grad = st.p->grad, .clip = clip, .step = gs, .nesterov = g.nesterov,
                           .buf = st.m, .u = mb.u[j]});
      }
    }
    {
      ProfRegion pr(prof, "muon.newton_schulz", "optim");
      if (ns_batched) {
        be->newton_schulz_many(mb.args(ns_sched[gi], ns_prec[gi]));
      } else {
        for (size_t j = 0; j < batch.size(); ++j)
          be->newton_schulz(mb.u[j], mb.o[j], mb.rows[j], mb.cols[j], ns_sched[gi], ns_prec[gi]);
      }
    }
    for (size_t j = 0; j < batch.size(); ++j) {
      const OptState& st = states[batch[j]];
      if (st.normuon) {
        ProfRegion pr(prof, "muon.normuon", "optim");
        be->normuon_scale({.rows = st.rows, .cols = st.cols, .o = mb.o[j], .v = st.v, .beta2 = g.beta2,
                           .eps = g.eps, .clip = clip});
      }
      ProfRegion pr(prof, "muon.apply", "optim");
      // Orthogonalised updates have unit singular values; scaling by sqrt(max(1, rows/cols)) keeps
      // the per-element update RMS comparable for tall matrices.
      const float scale = std::sqrt(std::max(1.0f, float(st.rows) / float(st.cols)));
      be->muon_apply({.n = st.n, .p = st.p->data, .o = mb.o[j], .clip = clip, .step = gs, .scale = scale,
                      .cautious = g.cautious_wd});
    }
  }
}

// State layout: magic[8], u32 n_params, u64 t[4], then per parameter: u32 name length, name bytes,
// u8 kind (0 AdamW, 1 Muon, 2 NorMuon), u64 numel, then numel floats (m) and, for AdamW, numel
// floats (v); for NorMuon u64 rows and rows floats (v).
void Optimizer::save(std::ostream& out) const {
  const OptimizerImpl& s = *impl;
  if (s.sharded && (!s.gathered_fresh || s.comm->rank() != 0))
    fail("optimizer: a sharded state is saved by rank 0 after gather_state()");
  std::vector<float> host;  // one state at a time, copied from the device or the gathered state
  auto fetch = [&](const float* dev, int64_t soff, int64_t n) {
    host.resize(size_t(n));
    if (s.sharded) std::memcpy(host.data(), s.gathered.data() + soff, sizeof(float) * size_t(n));
    else s.be->to_host(host.data(), dev, sizeof(float) * n);
  };
  out.write(kStateMagic, 8);
  uint32_t np = uint32_t(s.states.size());
  out.write(reinterpret_cast<const char*>(&np), 4);
  out.write(reinterpret_cast<const char*>(s.t), sizeof(s.t));
  for (const OptState& st : s.states) {
    uint32_t len = uint32_t(st.p->name.size());
    out.write(reinterpret_cast<const char*>(&len), 4);
    out.write(st.p->name.data(), len);
    uint8_t kind = st.normuon ? 2 : st.muon ? 1 : 0;
    out.write(reinterpret_cast<const char*>(&kind), 1);
    uint64_t n = uint64_t(st.n);
    out.write(reinterpret_cast<const char*>(&n), 8);
    fetch(st.m, st.soff, st.n);
    out.write(reinterpret_cast<const char*>(host.data()), std::streamsize(sizeof(float) * st.n));
    if (!st.muon) {
      fetch(st.v, st.soff + st.n, st.n);
      out.write(reinterpret_cast<const char*>(host.data()), std::streamsize(sizeof(float) * st.n));
    } else if (st.normuon) {
      uint64_t rows = uint64_t(st.rows);
      out.write(reinterpret_cast<const char*>(&rows), 8);
      fetch(st.v, st.soff + st.n, st.rows);
      out.write(reinterpret_cast<const char*>(host.data()), std::streamsize(sizeof(float) * st.rows));
    }
  }
  if (!out) fail("optimizer: failed to write state");
}

void Optimizer::load(std::istream& in) {
  OptimizerImpl& s = *impl;
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  OptimStateTable t = parse_optim_state(bytes);
  if (t.params.size() != s.states.size())
    fail("optimizer state is for {} parameters, the model has {}", t.params.size(), s.states.size());
  // Check everything before copying, so a failed load leaves the optimizer untouched.
  for (size_t i = 0; i < t.params.size(); ++i) {
    const OptimStateEntry& e = t.params[i];
    const OptState& st = s.states[i];
    if (e.name != st.p->name)
      fail("optimizer state parameter '{}' does not match the model's '{}'", e.name, st.p->name);
    auto kind = [](bool muon, bool normuon) { return normuon ? "normuon" : muon ? "muon" : "adamw"; };
    if (e.muon != st.muon || e.normuon != st.normuon)
      fail("optimizer state for '{}' was {} but the config uses {}", e.name, kind(e.muon, e.normuon),
           kind(st.muon, st.normuon));
    if (e.n != uint64_t(st.n))
      fail("optimizer state for '{}' has {} elements, the model {}", e.name, e.n, st.n);
    if (st.normuon && e.v.size() != sizeof(float) * size_t(st.rows))
      fail("optimizer state for '{}' has {} rows, the model {}", e.name, e.v.size() / 4, st.rows);
  }
  // The whole state in its unsharded layout; this rank keeps its share.
  std::vector<float> whole(size_t(s.storage_n));
  for (size_t i = 0; i < t.params.size(); ++i) {
    const OptimStateEntry& e = t.params[i];
    const OptState& st = s.states[i];
    std::memcpy(whole.data() + st.soff, e.m.data(), e.m.size());
    if (!st.muon || st.normuon) std::memcpy(whole.data() + st.soff + st.n, e.v.data(), e.v.size());
  }
  const int64_t lo = s.own_state_begin();
  const int64_t hi = s.sharded ? s.state_bounds[size_t(s.comm->rank()) + 1] : s.storage_n;
  s.be->to_device(s.storage.as<float>(), whole.data() + lo, sizeof(float) * size_t(hi - lo));
  std::memcpy(s.t, t.steps, sizeof(t.steps));
}

}  // namespace clm
