// The GPT, written once against the device interface (backend/backend.h): builds the parameter
// list from a ModelConfig, carves parameters, gradients and activations out of a few large device
// allocations, initialises the weights and answers for them (params, gradients, accessors). The
// forward and backward are in gpt_train.cpp, the cached forward of inference in gpt_infer.cpp,
// the state they share in gpt_impl.h; the math is written down in docs/MODEL.md.
//
// Memory: params (fp32 master), grads (fp32) and a bf16 mirror of the params share one layout of
// offsets, computed from the config alone with the activation arena's (model/layout.h).
// Activations for max_B x max_T tokens live in one arena: per layer everything backward needs
// (residual inputs, norm statistics, matmul inputs in the matmul precision, q/k/v, attention
// output and log-sum-exp, MLP pre-activations), plus scratch shared by all layers.
//
// bf16 weights: matmuls read a bf16 copy of the weights. It is refreshed at the start of a forward
// whenever the fp32 weights may have changed: after init_weights(), zero_grad(), backward() (the
// optimizer step follows), or an explicit weights_changed(). The optimizer never has to know.
#include "model/gpt_impl.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace clm {

int64_t Param::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

void Param::to_host(float* dst) const { backend->to_host(dst, data, sizeof(float) * numel()); }
void Param::from_host(const float* src) { backend->to_device(data, src, sizeof(float) * numel()); }
void Param::grad_to_host(float* dst) const { backend->to_host(dst, grad, sizeof(float) * numel()); }

void GPTImpl::build() {
  const ModelLayout& l = layout;
  act = activation_from_name(cfg.activation);
  prec = resolve_precision(cfg.matmul_precision, *be);
  d = l.d; H = l.H; Hkv = l.Hkv; hd = l.hd; L = l.L; V = l.V; Vp = l.Vp; Hd = l.Hd;
  qw = l.qw; kvw = l.kvw; qkvw = l.qkvw; hw = l.hw;
  block_offs = l.layers;
  off_wte = l.wte; off_big = l.bigram; off_fg = l.final_gain; off_head = l.head; off_mtp = l.mtp;
  off_smear = l.smear;
  nparams = l.param_floats;
  chunk_rows = l.act.chunk_rows;
  logits_ld = l.act.logits_ld;

  check_fits_memory(*be, l.bytes, fmt::format("the model (B={} x T={})", max_B, max_T));
  params_buf = DeviceBuffer(*be, size_t(nparams) * 4);
  grads_buf = DeviceBuffer(*be, size_t(nparams) * 4);
  bf16_buf = DeviceBuffer(*be, size_t(nparams) * 2);
  for (const ParamSlot& s : l.params) {
    Param p;
    p.name = s.name;
    p.shape = s.shape;
    p.kind = s.kind;
    p.data = params_buf.as<float>() + s.offset;
    p.grad = grads_buf.as<float>() + s.offset;
    p.backend = be;
    params.push_back(std::move(p));
  }
  arena = DeviceBuffer(*be, size_t(l.act.floats) * 4);
  bind_activations();
  be->rope_tables(cos_t, sin_t, max_T, hd, cfg.rope_base);
  const int64_t s = l.act.io_stride;
  io = DeviceBuffer(*be, size_t(s) * 4 * size_t(l.act.io_arrays));
  tok_d = tok_d0 = io.as<int32_t>();
  tgt_d = tgt_d0 = tok_d + s;
  argmax_d = tgt_d + s;
  loss_d = reinterpret_cast<float*>(argmax_d + s);
  big_d = big_d0 = reinterpret_cast<int32_t*>(loss_d + s);
  int32_t* next = big_d + s;
  if (off_mtp >= 0) tgt2_d = tgt2_d0 = std::exchange(next, next + s);
  if (off_smear >= 0) prev_d = prev_d0 = next;
}

GPTImpl::Slot GPTImpl::slot(int64_t a) {
  const int64_t s = layout.act.io_stride;
  if (a == 0) return {tok_d0, tgt_d0, big_d0, tgt2_d0, prev_d0};
  if (a >= n_slots) {  // grown keeping the slots staged so far
    const int64_t n = std::max<int64_t>(a + 1, 2 * n_slots);
    DeviceBuffer grown(*be, size_t(n - 1) * kSlotArrays * size_t(s) * 4);
    if (n_slots > 1) be->copy(grown.as<void>(), slots_buf.as<void>(), slots_buf.bytes());
    slots_buf = std::move(grown);
    n_slots = n;
    ++memory_epoch;
  }
  int32_t* base = slots_buf.as<int32_t>() + (a - 1) * kSlotArrays * s;
  return {base, base + s, base + 2 * s, base + 3 * s, base + 4 * s};
}

void GPTImpl::use_slot(int64_t a) {
  const Slot s = slot(a);
  tok_d = s.tok, tgt_d = s.tgt, big_d = s.big, tgt2_d = s.tgt2, prev_d = s.prev;
}

LayerAct GPTImpl::bind_block(const BlockActs& b, float* base) {
  auto at = [base](int64_t off) { return off >= 0 ? base + off : nullptr; };
  LayerAct v;
  v.x = at(b.x), v.xpre = at(b.xpre), v.mid = at(b.mid), v.ln1_rstd = at(b.ln1_rstd), v.ln1_mm = at(b.ln1_mm);
  v.qraw = at(b.qraw), v.kraw = at(b.kraw), v.q_rstd = at(b.q_rstd), v.k_rstd = at(b.k_rstd);
  v.q = at(b.q), v.k = at(b.k), v.v = at(b.v), v.o = at(b.o), v.lse = at(b.lse), v.att_mm = at(b.att_mm);
  v.ln2_rstd = at(b.ln2_rstd), v.ln2_mm = at(b.ln2_mm), v.h = at(b.h), v.act_mm = at(b.act_mm);
  return v;
}

void GPTImpl::bind_activations() {
  const ActivationPlan& a = layout.act;
  float* base = arena.as<float>();
  auto at = [base](int64_t off) { return off >= 0 ? base + off : nullptr; };
  block_acts.resize(size_t(L));
  for (int i = 0; i < L; ++i) block_acts[size_t(i)] = bind_block(a.blocks[size_t(i)], base);
  dx0 = at(a.dx0), x_final = at(a.x_final), lnf_rstd = at(a.lnf_rstd), lnf_mm = at(a.lnf_mm), dxf = at(a.dxf);
  head_dw = at(a.head_dw), logits = at(a.logits), logits_mm = at(a.logits_mm);
  tmp_d = at(a.tmp_d), tmp_mm = at(a.tmp_mm), qkv = at(a.qkv), dres = at(a.dres);
  dtmp = at(a.dtmp), dtmp2 = at(a.dtmp2), dmm = at(a.dmm), dq = at(a.dq), dk = at(a.dk), dv = at(a.dv);
  cos_t = at(a.cos_t), sin_t = at(a.sin_t);
  mtp_u = at(a.mtp_u), mtp_un = at(a.mtp_un), mtp_rstd = at(a.mtp_rstd), mtp_dw = at(a.mtp_dw);
}

// ---------------------------------------------------------------------------------------------------
namespace {

// The layout of a model the constructor can build: a valid config with a vocabulary, room for tokens.
ModelLayout buildable_layout(const ModelConfig& cfg, int max_B, int max_T) {
  validate(cfg);
  if (cfg.vocab_size <= 0) fail("model config: vocab_size must be positive, got {}", cfg.vocab_size);
  if (max_B <= 0 || max_T <= 0) fail("GPT: max batch and sequence length must be positive");
  return model_layout(cfg, max_B, max_T);
}

}  // namespace

GPT::GPT(const ModelConfig& cfg, int max_B, int max_T, Backend& be) : impl(new GPTImpl) {
  impl->be = &be;
  impl->cfg = cfg;
  impl->max_B = max_B;
  impl->max_T = max_T;
  try {
    impl->layout = buildable_layout(cfg, max_B, max_T);
    impl->build();
  } catch (...) {
    delete impl;
    impl = nullptr;
    throw;
  }
}
GPT::~GPT() { delete impl; }

size_t GPT::memory_need(const ModelConfig& cfg, int max_B, int max_T, Backend&) {
  return buildable_layout(cfg, max_B, max_T).bytes;
}
GPT::GPT(GPT&& o) noexcept : impl(o.impl) { o.impl = nullptr; }
GPT& GPT::operator=(GPT&& o) noexcept {
  if (this != &o) {
    delete impl;
    impl = o.impl;
    o.impl = nullptr;
  }
  return *this;
}

void GPT::init_weights(uint64_t seed) {
  GPTImpl& m = *impl;
  Rng rng(seed);
  const float std0 = m.cfg.init_std;
  const float out_std = std0 / std::sqrt(2.0f * m.L);
  std::vector<float> host;
  for (auto& p : m.params) {
    int64_t n = p.numel();
    host.assign(size_t(n), 0.0f);
    bool is_out = p.name.ends_with(".wo") || p.name.ends_with(".w_out");
    if (p.name.ends_with(".x0_mix")) {
      host = {1.0f, 0.0f};  // a x + b x0 starts as x
    } else if (p.name == "smear") {
      // lam = 0: no smearing until trained (g = 0: the gate starts at one half)
    } else if (p.kind == ParamKind::Scalar) {
      std::fill(host.begin(), host.end(), 1.0f);
    } else if (p.kind == ParamKind::Head || is_out) {
      float s = is_out ? out_std : std0;
      if (m.cfg.zero_init_out) s = 0.0f;
      for (int64_t i = 0; i < n; ++i) host[i] = s == 0.0f ? 0.0f : s * rng.normal();
    } else if (p.name == "bigram_embed" || p.name.ends_with(".value_embed")) {
      // The bigram and value embedding tables start at zero: features that are no-ops until trained.
    } else {
      for (int64_t i = 0; i < n; ++i) host[i] = std0 * rng.normal();
    }
    if (p.name == "wte" || p.name == "lm_head")  // rows of the padded vocabulary stay zero
      std::fill(host.begin() + int64_t(m.V) * m.d, host.end(), 0.0f);
    p.from_host(host.data());
  }
  m.bf16_dirty = true;
  m.have_fwd = false;
}

void GPT::zero_grad() {
  impl->be->zero(impl->grads_buf.as<float>(), sizeof(float) * impl->nparams);
  impl->bf16_dirty = true;
}

std::vector<Param>& GPT::params() { return impl->params; }
float* GPT::grad_buffer() { return impl->grads_buf.as<float>(); }
int64_t GPT::grad_floats() const { return impl->nparams; }
float* GPT::grad_accumulator() {
  if (!impl->G_acc.as<float>()) {
    impl->G_acc = DeviceBuffer(*impl->be, size_t(impl->nparams) * 4);
    ++impl->memory_epoch;
  }
  return impl->G_acc.as<float>();
}
uint64_t GPT::memory_epoch() const { return impl->memory_epoch; }

double* GPT::step_scalars(int64_t n) {
  if (impl->scalars.bytes() < size_t(n) * 8) {
    impl->scalars = DeviceBuffer(*impl->be, size_t(n) * 8);
    ++impl->memory_epoch;
  }
  return impl->scalars.as<double>();
}
int64_t GPT::num_params() const { return impl->layout.num_params(); }
double GPT::flops_per_token(int T) const { return impl->layout.flops_per_token(T); }

const ModelConfig& GPT::config() const { return impl->cfg; }
// With a profiler the model issues its ops through a ProfiledBackend over its device, which times
// each under the innermost open ProfRegion; without one, straight to the device.
void GPT::set_profiler(Profiler* p) {
  GPTImpl& m = *impl;
  if (!m.device) m.device = m.be;
  m.prof = p;
  if (p && m.profiled) m.profiled->attach(*p);
  if (p && !m.profiled) m.profiled = std::make_unique<ProfiledBackend>(*m.device, *p);
  m.be = p ? m.profiled.get() : m.device;
}
void GPT::set_matmul_precision(MatPrec p) {
  impl->prec = p;
  impl->bf16_dirty = true;
}
MatPrec GPT::matmul_precision() const { return impl->prec; }
Backend& GPT::backend() const { return impl->device ? *impl->device : *impl->be; }
void GPT::set_grad_enabled(bool on) { impl->grad_enabled = on; }
void GPT::weights_changed() { impl->bf16_dirty = true; }

}  // namespace clm