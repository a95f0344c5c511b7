// The optimizer, written against the device interface: routes each parameter to its group by ParamKind (Matrix -> optim.matrix, Embedding ->
// optim.embed, Head -> optim.head, Scalar -> optim.scalar), clips by the global gradient norm, then
// runs AdamW or Muon per group. State (moments, Muon momentum) lives in one allocation; save/load
// write it with the parameter names and sizes so a mismatched checkpoint is refused.
#include "optim/optim.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstring>
#include <istream>
#include <iterator>
#include <ostream>

#include "backend/backend.h"
#include "core/common.h"
#include "core/profiler.h"
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

}  // namespace

struct OptState {
  Param* p;
  int group;          // index into groups
  bool muon;
  int64_t n, rows, cols;
  float* m = nullptr;  // AdamW first moment / Muon momentum buffer
  float* v = nullptr;  // AdamW second moment
};

// FLOPs of one Newton-Schulz run (for the profiler): steps * (4 a^2 b + 2 a^3), a = short side.
static double ns_flops(int64_t rows, int64_t cols, int steps) {
  double a = double(std::min(rows, cols)), b = double(std::max(rows, cols));
  return steps * (4.0 * a * a * b + 2.0 * a * a * a);
}

struct OptimizerImpl {
  Backend* be = nullptr;
  OptimConfig cfg;
  MatPrec ns_prec[4] = {MatPrec::BF16, MatPrec::BF16, MatPrec::BF16, MatPrec::BF16};
  const OptimGroup* groups[4];
  std::vector<OptState> states;
  DeviceBuffer storage;            // all moments, one device allocation
  int64_t storage_n = 0;           // floats in storage
  DeviceBuffer scratch_u, scratch_o;  // Muon: momentum-mixed update, its orthogonalisation
  int64_t t[4] = {0, 0, 0, 0};     // steps taken per group (AdamW bias correction)
  Profiler* prof = nullptr;

  // Points each state's moments into `storage` (m, then v for AdamW), in state order. Called after
  // storage is (re)allocated: at construction and when load() swaps in a freshly read buffer.
  void bind_storage() {
    float* cur = storage.as<float>();
    for (OptState& st : states) {
      st.m = cur;
      cur += st.n;
      if (!st.muon) {
        st.v = cur;
        cur += st.n;
      }
    }
  }
};

Optimizer::Optimizer(std::vector<Param>& params, const OptimConfig& cfg) : impl(std::make_unique<OptimizerImpl>()) {
  OptimizerImpl& s = *impl;
  s.cfg = cfg;
  s.groups[0] = &s.cfg.matrix;
  s.groups[1] = &s.cfg.embed;
  s.groups[2] = &s.cfg.head;
  s.groups[3] = &s.cfg.scalar;
  if (params.empty()) fail("optimizer: the model has no parameters");
  s.be = params.front().backend;
  if (!s.be) fail("optimizer: parameter '{}' is not on a device", params.front().name);
  for (int gi = 0; gi < 4; ++gi) s.ns_prec[gi] = resolve_precision(s.groups[gi]->ns_precision, *s.be);
  int64_t total = 0, max_muon = 0;
  for (Param& p : params) {
    if (p.backend != s.be) fail("optimizer: parameter '{}' is on another device", p.name);
    OptState st;
    st.p = &p;
    st.group = group_index(p.kind);
    const OptimGroup& g = *s.groups[st.group];
    if (g.kind != "adamw" && g.kind != "muon")
      fail("optim.{}.kind '{}' is unknown (adamw, muon)", kGroupNames[st.group], g.kind);
    st.muon = g.kind == "muon";
    st.n = numel_of(p.shape);
    if (st.muon) {
      if (p.shape.size() < 2)
        fail("parameter '{}' is {}-D but optim.{}.kind is muon (Muon needs a matrix)", p.name, p.shape.size(),
             kGroupNames[st.group]);
      st.rows = p.shape[0];
      st.cols = st.n / st.rows;  // trailing dimensions flattened
      max_muon = std::max(max_muon, st.n);
      total += st.n;
    } else {
      st.rows = 1;
      st.cols = st.n;
      total += 2 * st.n;
    }
    s.states.push_back(st);
  }
  s.storage_n = total;
  s.storage = DeviceBuffer(*s.be, size_t(total) * 4);
  s.bind_storage();
  s.scratch_u = DeviceBuffer(*s.be, size_t(max_muon) * 4);
  s.scratch_o = DeviceBuffer(*s.be, size_t(max_muon) * 4);
}

Optimizer::~Optimizer() = default;
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;

void Optimizer::set_profiler(Profiler* p) { impl->prof = p; }

std::string Optimizer::group_of(const std::string& param_name) const {
  for (const OptState& st : impl->states)
    if (st.p->name == param_name) return kGroupNames[st.group];
  fail("optimizer: no parameter named '{}'", param_name);
}

void Optimizer::warmup() {
  OptimizerImpl& s = *impl;
  std::vector<std::tuple<int64_t, int64_t, int, MatPrec>> done;
  for (const OptState& st : s.states) {
    if (!st.muon) continue;
    const OptimGroup& g = *s.groups[st.group];
    auto key = std::make_tuple(st.rows, st.cols, g.ns_steps, s.ns_prec[st.group]);
    if (std::find(done.begin(), done.end(), key) != done.end()) continue;
    done.push_back(key);
    s.be->zero(s.scratch_u.as<float>(), sizeof(float) * st.n);
    s.be->newton_schulz(s.scratch_u.as<float>(), s.scratch_o.as<float>(), st.rows, st.cols, g.ns_steps,
                        s.ns_prec[st.group]);
  }
}

float Optimizer::step(float lr_scale, float wd_scale, float muon_momentum_override) {
  OptimizerImpl& s = *impl;
  // Global gradient norm over every parameter, then the clip factor applied while reading grads.
  double ss = 0;
  {
    int64_t n = 0;
    for (const OptState& st : s.states) n += st.n;
    ProfScope ps(s.prof, "optim.grad_norm", "optim", 2.0 * double(n), 4.0 * double(n));
    for (const OptState& st : s.states) ss += s.be->sum_squares(st.p->grad, st.n);
  }
  const float norm = float(std::sqrt(ss));
  float gscale = 1.0f;
  if (s.cfg.grad_clip > 0 && norm > s.cfg.grad_clip) gscale = s.cfg.grad_clip / (norm + 1e-6f);
  if (!std::isfinite(norm)) return norm;  // no update from a NaN/inf gradient; the caller reports it

  bool has[4] = {false, false, false, false};
  for (const OptState& st : s.states) has[st.group] = true;
  for (int gi = 0; gi < 4; ++gi)
    if (has[gi]) ++s.t[gi];

  static const char* const kAdamNames[4] = {"adamw.matrix", "adamw.embed", "adamw.head", "adamw.scalar"};
  for (int gi = 0; gi < 4; ++gi) {
    if (!has[gi]) continue;
    const OptimGroup& g = *s.groups[gi];
    const float lr = g.lr * lr_scale, wd = g.weight_decay * wd_scale;
    if (g.kind == "adamw") {
      int64_t n = 0;
      for (const OptState& st : s.states)
        if (st.group == gi) n += st.n;
      ProfScope ps(s.prof, kAdamNames[gi], "optim", 12.0 * double(n), 4.0 * 7.0 * double(n));
      for (const OptState& st : s.states)
        if (st.group == gi) s.be->adamw_update(st.p->data, st.p->grad, st.m, st.v, st.n, gscale, lr, g.beta1, g.beta2,
                                         g.eps, wd, s.t[gi]);
    } else {
      const float mu = muon_momentum_override >= 0 ? muon_momentum_override : g.momentum;
      for (const OptState& st : s.states) {
        if (st.group != gi) continue;
        {
          ProfScope ps(s.prof, "muon.momentum", "optim", 4.0 * double(st.n), 4.0 * 4.0 * double(st.n));
          s.be->muon_momentum(st.p->grad, st.m, s.scratch_u.as<float>(), st.n, gscale, mu, g.nesterov);
        }
        {
          int64_t a = std::min(st.rows, st.cols), b = std::max(st.rows, st.cols);
          const MatPrec np = s.ns_prec[gi];
          double bytes = (np == MatPrec::BF16 ? 2.0 : 4.0) * g.ns_steps * (3.0 * a * b + 3.0 * a * a) + 8.0 * st.n;
          ProfScope ps(s.prof, "muon.newton_schulz", "optim", ns_flops(st.rows, st.cols, g.ns_steps), bytes);
          s.be->newton_schulz(s.scratch_u.as<float>(), s.scratch_o.as<float>(), st.rows, st.cols, g.ns_steps, np);
        }
        {
          ProfScope ps(s.prof, "muon.apply", "optim", 3.0 * double(st.n), 4.0 * 3.0 * double(st.n));
          // Orthogonalised updates have unit singular values; scaling by sqrt(max(1, rows/cols)) keeps
          // the per-element update RMS comparable for tall matrices.
          const float scale = std::sqrt(std::max(1.0f, float(st.rows) / float(st.cols)));
          s.be->muon_apply(st.p->data, s.scratch_o.as<float>(), st.n, lr, scale, wd);
        }
      }
    }
  }
  return norm;
}

// State layout: magic[8], u32 n_params, u64 t[4], then per parameter: u32 name length, name bytes,
// u8 muon, u64 numel, then numel floats (m) and, for AdamW, numel floats (v).
void Optimizer::save(std::ostream& out) const {
  const OptimizerImpl& s = *impl;
  std::vector<float> host;  // one state at a time, copied from the device
  out.write(kStateMagic, 8);
  uint32_t np = uint32_t(s.states.size());
  out.write(reinterpret_cast<const char*>(&np), 4);
  out.write(reinterpret_cast<const char*>(s.t), sizeof(s.t));
  for (const OptState& st : s.states) {
    uint32_t len = uint32_t(st.p->name.size());
    out.write(reinterpret_cast<const char*>(&len), 4);
    out.write(st.p->name.data(), len);
    uint8_t muon = st.muon ? 1 : 0;
    out.write(reinterpret_cast<const char*>(&muon), 1);
    uint64_t n = uint64_t(st.n);
    out.write(reinterpret_cast<const char*>(&n), 8);
    host.resize(size_t(st.n));
    s.be->to_host(host.data(), st.m, sizeof(float) * st.n);
    out.write(reinterpret_cast<const char*>(host.data()), std::streamsize(sizeof(float) * st.n));
    if (!st.muon) {
      s.be->to_host(host.data(), st.v, sizeof(float) * st.n);
      out.write(reinterpret_cast<const char*>(host.data()), std::streamsize(sizeof(float) * st.n));
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
    if (e.muon != st.muon)
      fail("optimizer state for '{}' was {} but the config uses {}", e.name, e.muon ? "muon" : "adamw",
           st.muon ? "muon" : "adamw");
    if (e.n != uint64_t(st.n))
      fail("optimizer state for '{}' has {} elements, the model {}", e.name, e.n, st.n);
  }
  std::vector<float> storage(size_t(s.storage_n));
  const float* base = s.storage.as<float>();
  for (size_t i = 0; i < t.params.size(); ++i) {
    const OptimStateEntry& e = t.params[i];
    const OptState& st = s.states[i];
    std::memcpy(storage.data() + (st.m - base), e.m.data(), e.m.size());
    if (!st.muon) std::memcpy(storage.data() + (st.v - base), e.v.data(), e.v.size());
  }
  s.be->to_device(s.storage.as<float>(), storage.data(), sizeof(float) * storage.size());
  std::memcpy(s.t, t.steps, sizeof(t.steps));
}

}  // namespace clm
