// The GPT, written once against the device interface (backend/backend.h): builds the parameter
// list from a ModelConfig, carves parameters, gradients and activations out of a few large device
// allocations, initialises the weights and answers for them (params, gradients, accessors). The
// forward and backward are in gpt_train.cpp, the cached forward of inference in gpt_infer.cpp,
// the state they share in gpt_impl.h; the math is written down in docs/MODEL.md.
//
// Memory: params (fp32 master), grads (fp32) and a bf16 mirror of the params share one layout of
// offsets. Activations for max_B x max_T tokens live in one arena: per layer everything backward
// needs (residual inputs, norm statistics, matmul inputs in the matmul precision, q/k/v, attention
// output and log-sum-exp, MLP pre-activations), plus scratch shared by all layers.
//
// bf16 weights: matmuls read a bf16 copy of the weights. It is refreshed at the start of a forward
// whenever the fp32 weights may have changed: after init_weights(), zero_grad(), backward() (the
// optimizer step follows), or an explicit weights_changed(). The optimizer never has to know.
#include "model/gpt_impl.h"

#include <algorithm>
#include <cmath>

namespace clm {

int64_t Param::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

void Param::to_host(float* dst) const { backend->to_host(dst, data, sizeof(float) * numel()); }
void Param::from_host(const float* src) { backend->to_device(data, src, sizeof(float) * numel()); }
void Param::grad_to_host(float* dst) const { backend->to_host(dst, grad, sizeof(float) * numel()); }

void GPTImpl::build(bool allocate) {
  const ModelConfig& c = cfg;
  if (c.n_layer <= 0 || c.d_model <= 0 || c.n_head <= 0 || c.head_dim <= 0 || c.vocab_size <= 0)
    fail("model config: n_layer, d_model, n_head, head_dim and vocab_size must be positive");
  if (c.n_kv_head <= 0 || c.n_head % c.n_kv_head != 0)
    fail("model config: n_head ({}) must be a multiple of n_kv_head ({})", c.n_head, c.n_kv_head);
  if (c.head_dim % 2 != 0) fail("model config: head_dim ({}) must be even for RoPE", c.head_dim);
  act = activation_from_name(c.activation);
  prec = resolve_precision(c.matmul_precision, *be);
  if (max_B <= 0 || max_T <= 0) fail("GPT: max batch and sequence length must be positive");
  d = c.d_model; H = c.n_head; Hkv = c.n_kv_head; hd = c.head_dim; L = c.n_layer;
  V = c.vocab_size; Vp = c.padded_vocab(); Hd = c.mlp_hidden();
  qw = H * hd; kvw = Hkv * hd; qkvw = qw + 2 * kvw;
  hw = c.activation == "swiglu" ? 2 * Hd : Hd;

  // ---- parameters: names, shapes, offsets ----
  int64_t off = 0;
  std::vector<int64_t> poff;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, ParamKind kind) {
    Param p;
    p.name = name;
    p.shape = std::move(shape);
    p.kind = kind;
    int64_t o = off;
    off += round16(p.numel());
    params.push_back(p);
    poff.push_back(o);
    return o;
  };
  // wq, wk, wv (and w_in, w_gate) are carved back to back, so each group is one matmul.
  auto add_adjacent = [&](const std::string& name, std::vector<int64_t> shape, ParamKind kind) {
    Param p;
    p.name = name;
    p.shape = std::move(shape);
    p.kind = kind;
    int64_t o = off;
    off += p.numel();
    params.push_back(p);
    poff.push_back(o);
    return o;
  };
  off_wte = add("wte", {Vp, d}, ParamKind::Embedding);
  if (c.bigram_buckets == 1 || c.bigram_buckets < 0)
    fail("model config: bigram_buckets must be 0 (off) or >= 2, got {}", c.bigram_buckets);
  if (c.bigram_buckets > 0) off_big = add("bigram_embed", {c.bigram_buckets, d}, ParamKind::Embedding);
  if (c.attn_window < 0) fail("model config: attn_window must be >= 0 (0 = full attention), got {}", c.attn_window);
  if (c.value_embeds < 0 || c.value_embeds > L)
    fail("model config: value_embeds must be in [0, n_layer = {}], got {}", L, c.value_embeds);
  loff.resize(L);
  for (int i = L - c.value_embeds; i < L; ++i)
    loff[i].ve = add(fmt::format("blocks.{}.attn.value_embed", i), {Vp, kvw}, ParamKind::Embedding);
  for (int i = 0; i < L; ++i) {
    std::string pre = fmt::format("blocks.{}.", i);
    LayerOff& lo = loff[i];
    if (c.x0_skips && i > 0) lo.x0 = add(pre + "x0_mix", {2}, ParamKind::Scalar);
    if (c.norm_gain) lo.attn_g = add(pre + "attn_norm.gain", {d}, ParamKind::Scalar);
    lo.wqkv = add_adjacent(pre + "attn.wq", {qw, d}, ParamKind::Matrix);
    add_adjacent(pre + "attn.wk", {kvw, d}, ParamKind::Matrix);
    add_adjacent(pre + "attn.wv", {kvw, d}, ParamKind::Matrix);
    off = round16(off);
    if (c.qk_norm && c.norm_gain) {
      lo.qn_g = add(pre + "attn.q_norm.gain", {hd}, ParamKind::Scalar);
      lo.kn_g = add(pre + "attn.k_norm.gain", {hd}, ParamKind::Scalar);
    }
    lo.wo = add(pre + "attn.wo", {d, qw}, ParamKind::Matrix);
    if (c.norm_gain) lo.mlp_g = add(pre + "mlp_norm.gain", {d}, ParamKind::Scalar);
    lo.w_in = add_adjacent(pre + "mlp.w_in", {Hd, d}, ParamKind::Matrix);
    if (c.activation == "swiglu") add_adjacent(pre + "mlp.w_gate", {Hd, d}, ParamKind::Matrix);
    off = round16(off);
    lo.w_out = add(pre + "mlp.w_out", {d, Hd}, ParamKind::Matrix);
  }
  if (c.norm_gain) off_fg = add("final_norm.gain", {d}, ParamKind::Scalar);
  off_head = c.tie_embeddings ? off_wte : add("lm_head", {Vp, d}, ParamKind::Head);
  if (!(c.mtp_weight >= 0) || !std::isfinite(c.mtp_weight))
    fail("model config: mtp_weight must be a finite number >= 0, got {}", c.mtp_weight);
  if (c.mtp_weight > 0) off_mtp = add("mtp_proj", {d, d}, ParamKind::Matrix);  // last: the others init as without
  nparams = off;

  // ---- activations ----
  const int64_t N = int64_t(max_B) * max_T;
  chunk_rows = std::max<int64_t>(1, std::min<int64_t>(N, (int64_t(1) << 25) / Vp));  // <= 128 MiB of logits
  int64_t total = 0;
  std::vector<std::pair<float**, int64_t>> plan;
  auto carve = [&](float** dst, int64_t n) { plan.push_back({dst, round16(n)}); total += round16(n); };
  la.resize(L);
  for (int i = 0; i < L; ++i) {
    carve_layer(la[i], N, carve, true);
    if (loff[i].x0 >= 0) carve(&la[i].xpre, N * d);
    else la[i].xpre = nullptr;
  }
  if (c.x0_skips) carve(&dx0, N * d);
  int64_t wmax = std::max<int64_t>({d, qkvw, hw, Hd});
  carve(&x_final, N * d);
  carve(&lnf_rstd, N);
  carve(&lnf_mm, N * d);
  carve(&dxf, N * d);
  carve(&head_dw, int64_t(Vp) * d);
  carve(&logits, chunk_rows * Vp);
  carve(&logits_mm, chunk_rows * Vp);
  carve(&tmp_d, N * wmax);
  carve(&tmp_mm, N * wmax);
  carve(&qkv, N * qkvw);
  carve(&dres, N * d);
  carve(&dtmp, N * wmax);
  carve(&dtmp2, N * wmax);
  carve(&dmm, N * wmax);
  carve(&dq, N * qw);
  carve(&dk, N * kvw);
  carve(&dv, N * kvw);
  carve(&cos_t, int64_t(max_T) * hd / 2);
  carve(&sin_t, int64_t(max_T) * hd / 2);
  if (off_mtp >= 0) {
    carve(&mtp_u, N * d);
    carve(&mtp_un, N * d);
    carve(&mtp_rstd, N);
    carve(&mtp_dw, int64_t(d) * d);
  }
  const int io_arrays = off_mtp >= 0 ? 6 : 5;  // tokens, targets, argmax, loss, bigram rows (+ tgt2)
  need_bytes = size_t(nparams) * 10 + size_t(total) * 4 + size_t(round16(N)) * 4 * io_arrays;
  if (!allocate) return;
  check_fits_memory(*be, need_bytes, fmt::format("the model (B={} x T={})", max_B, max_T));
  P = DeviceBuffer(*be, size_t(nparams) * 4);
  G = DeviceBuffer(*be, size_t(nparams) * 4);
  Wb = DeviceBuffer(*be, size_t(nparams) * 2);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].data = P.as<float>() + poff[i];
    params[i].grad = G.as<float>() + poff[i];
    params[i].backend = be;
  }
  A = DeviceBuffer(*be, size_t(total) * 4);
  int64_t o = 0;
  for (auto& [dst, n] : plan) {
    *dst = A.as<float>() + o;
    o += n;
  }
  be->rope_tables(cos_t, sin_t, max_T, hd, c.rope_base);
  io = DeviceBuffer(*be, size_t(round16(N)) * 4 * io_arrays);
  tok_d = io.as<int32_t>();
  tgt_d = tok_d + round16(N);
  argmax_d = tgt_d + round16(N);
  loss_d = reinterpret_cast<float*>(argmax_d + round16(N));
  big_d = reinterpret_cast<int32_t*>(loss_d + round16(N));
  if (off_mtp >= 0) tgt2_d = big_d + round16(N);
}

// ---------------------------------------------------------------------------------------------------
GPT::GPT(const ModelConfig& cfg, int max_B, int max_T, Backend& be) : impl(new GPTImpl) {
  impl->be = &be;
  impl->cfg = cfg;
  impl->max_B = max_B;
  impl->max_T = max_T;
  try {
    impl->build(true);
  } catch (...) {
    delete impl;
    impl = nullptr;
    throw;
  }
}
GPT::~GPT() { delete impl; }

size_t GPT::memory_need(const ModelConfig& cfg, int max_B, int max_T, Backend& be) {
  GPTImpl layout;
  layout.be = &be;
  layout.cfg = cfg;
  layout.max_B = max_B;
  layout.max_T = max_T;
  layout.build(false);
  return layout.need_bytes;
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
  impl->be->zero(impl->G.as<float>(), sizeof(float) * impl->nparams);
  impl->bf16_dirty = true;
}

std::vector<Param>& GPT::params() { return impl->params; }
float* GPT::grad_buffer() { return impl->G.as<float>(); }
int64_t GPT::grad_floats() const { return impl->nparams; }
float* GPT::grad_accumulator() {
  if (!impl->G_acc.as<float>()) impl->G_acc = DeviceBuffer(*impl->be, size_t(impl->nparams) * 4);
  return impl->G_acc.as<float>();
}
int64_t GPT::num_params() const {
  int64_t n = 0;
  for (auto& p : impl->params) n += p.numel();
  return n;
}

double GPT::flops_per_token(int T) const {
  const GPTImpl& m = *impl;
  // matmul FLOPs of one token's forward: 2 per weight it multiplies (the embedding is a lookup)
  double mm = double(m.L) * (double(m.qkvw) * m.d + double(m.qw) * m.d + double(m.hw) * m.d +
                             double(m.Hd) * m.d) +
              double(m.Vp) * m.d * (m.off_mtp >= 0 ? 2 : 1);  // the multi-token head: the head again
  if (m.off_mtp >= 0) mm += double(m.d) * m.d;     // and mtp_proj
  // causal attention: a token does q.k and p.v over the keys it sees (t+1, or fewer with a window)
  double att = double(m.L) * 4.0 * m.H * m.hd * mean_attended_keys(T, m.cfg.attn_window);
  return 3.0 * (2.0 * mm + att);  // backward = 2x forward
}

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