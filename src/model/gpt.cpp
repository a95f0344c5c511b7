// The GPT, written once against the device interface (backend/backend.h): builds the parameter
// list from a ModelConfig, carves parameters, gradients and activations out of a few large device
// allocations, and chains the backend's ops into forward and backward. The math is written down in
// docs/MODEL.md. Host memory is touched only to move tokens in and losses out.
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
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/common.h"
#include "backend/backend.h"
#include "core/profiler.h"

namespace clm {

int64_t Param::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

void Param::to_host(float* dst) const { backend->to_host(dst, data, sizeof(float) * numel()); }
void Param::from_host(const float* src) { backend->to_device(data, src, sizeof(float) * numel()); }
void Param::grad_to_host(float* dst) const { backend->to_host(dst, grad, sizeof(float) * numel()); }

namespace {

int64_t round16(int64_t n) { return align16(n); }  // keep every carved view 64B aligned

struct LayerAct {  // activation pointers of one block
  float* x;         // [N,d] block input (residual stream)
  float* xpre;      // [N,d] the previous block's output before the embedding skip (model.x0_skips)
  float* mid;       // [N,d] after the attention residual add
  float* ln1_rstd;  // [N]
  float* ln1_mm;    // [N,d] attn-norm output in matmul precision
  float* qraw;      // [B,H,T,hd] q before qk-norm (only with qk_norm)
  float* kraw;      // [B,Hkv,T,hd]
  float* q_rstd;    // [B*H*T]
  float* k_rstd;    // [B*Hkv*T]
  float* q;         // [B,H,T,hd] after norm + rope
  float* k;         // [B,Hkv,T,hd]
  float* v;         // [B,Hkv,T,hd]
  float* o;         // [B,H,T,hd] attention output
  float* lse;       // [B*H*T]
  float* att_mm;    // [N,H*hd] merged attention output in matmul precision
  float* ln2_rstd;  // [N]
  float* ln2_mm;    // [N,d]
  float* h;         // [N,Hd] or [N,2Hd] MLP pre-activation (fp32)
  float* act_mm;    // [N,Hd] activation output in matmul precision
};

// Row of the bigram table for the pair (prev, cur): a 64-bit mix of the pair reduced to
// [0, K - 1); row K - 1 stands for "no previous token" (prev < 0).
int32_t bigram_row(int32_t prev, int32_t cur, int K) {
  if (prev < 0) return K - 1;
  uint64_t x = (uint64_t(uint32_t(prev)) << 32) | uint32_t(cur);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return int32_t(x % uint64_t(K - 1));
}

}  // namespace

struct GPTImpl {
  Backend* be = nullptr;
  ModelConfig cfg;
  Activation act = Activation::ReLU2;
  int max_B, max_T;
  int d, H, Hkv, hd, Hd, V, Vp, L, qw, kvw, qkvw, hw;  // hw: width of the MLP up projection
  MatPrec prec = MatPrec::BF16;
  bool grad_enabled = true;
  bool bf16_dirty = true;
  Profiler* prof = nullptr;

  ModelLayout layout;  // offsets and sizes of everything below (model/layout.h)
  std::vector<Param> params;
  int64_t nparams = 0;
  DeviceBuffer P, G, Wb;  // params, grads (fp32) and the bf16 mirror of the params
  DeviceBuffer G_acc;     // train_step's sum of micro-batch gradients (allocated at first use)
  std::vector<LayerOff> loff;  // the layout's parameter offsets, by the names the passes use
  int64_t off_wte = 0, off_fg = -1, off_head = 0;
  int64_t off_big = -1;  // the bigram table [bigram_buckets, d], when model.bigram_buckets > 0
  int64_t off_mtp = -1;  // mtp_proj [d, d], when model.mtp_weight > 0

  DeviceBuffer A;  // activation arena
  DeviceBuffer io;  // tokens, targets, per-token loss and argmax of one forward ([N] each)
  int32_t *tok_d = nullptr, *tgt_d = nullptr, *argmax_d = nullptr, *big_d = nullptr;
  int32_t* tgt2_d = nullptr;  // the multi-token head's targets (the token after next)
  float* loss_d = nullptr;
  std::vector<LayerAct> la;
  float *x_final, *lnf_rstd, *lnf_mm, *dxf, *head_dw, *logits, *logits_mm;
  float *tmp_d, *tmp_mm, *qkv, *dres, *dtmp, *dtmp2, *dmm, *dq, *dk, *dv, *cos_t, *sin_t;
  float* dx0 = nullptr;  // backward: the gradient reaching the embedding output through the skips
  // Multi-token head: u = mtp_proj lnf [N,d] (fp32), its RMSNorm in matmul precision and rstd,
  // and the gradient of mtp_proj computed in forward (added, scaled, in backward).
  float *mtp_u = nullptr, *mtp_un = nullptr, *mtp_rstd = nullptr, *mtp_dw = nullptr;
  float last_mtp = 0;  // mtp_loss() of the last forward
  int64_t chunk_rows = 0;

  // state of the last forward
  int B = 0, T = 0;
  bool have_fwd = false, fwd_had_grad = false;

  const void* w(int64_t off) const {  // weight in matmul precision
    if (prec == MatPrec::F32) return P.as<float>() + off;
    return Wb.as<bf16>() + off;
  }
  DType mmt() const { return matmul_dtype(prec); }
  // An fp32 buffer as a matmul input: itself in fp32 mode, else its bf16 rounding written to `dst`.
  const void* mm_input(const float* src, float* dst, int64_t n) {
    if (prec == MatPrec::F32) return src;
    be->convert(src, dst, n, mmt());
    return dst;
  }
  void refresh_bf16() {
    if (prec == MatPrec::BF16 && bf16_dirty) {
      ProfScope ps(prof, "weights.to_bf16", "fwd", 0, 6.0 * nparams);
      be->f32_to_bf16(P.as<float>(), Wb.as<bf16>(), nparams);
    }
    bf16_dirty = false;
  }

  // RMSNorm of rows of width d straight into a matmul-input buffer.
  void norm_to_mm(const float* x, int64_t goff, float* dst, float* rstd, int64_t N) {
    const float* g = goff >= 0 ? P.as<float>() + goff : nullptr;
    be->rmsnorm_fwd(x, g, dst, mmt(), rstd, N, d, cfg.norm_eps);
  }
  const float* pp(int64_t off) const { return off >= 0 ? P.as<float>() + off : nullptr; }
  // x[N, d] += bigram_embed[row[n]] (rows computed on the host, copied to `row_d`), through `tmp`.
  void add_bigram(const std::vector<int32_t>& rows, int32_t* row_d, float* x, float* tmp) {
    const int64_t N = int64_t(rows.size());
    ProfScope ps(prof, "embedding.bigram", "fwd", double(N) * d, 16.0 * N * d);
    be->to_device(row_d, rows.data(), sizeof(int32_t) * N);
    be->embedding_fwd(row_d, P.as<float>() + off_big, tmp, N, d);
    be->axpy(x, 1.0f, tmp, N * d);
  }
  float* gp(int64_t off) const { return off >= 0 ? G.as<float>() + off : nullptr; }

  // Scratch of the cached (inference) forward, sized on demand: one LayerAct that every layer
  // reuses (nothing is kept for backward), the head's row buffers and RoPE tables for `T` positions.
  struct Infer {
    DeviceBuffer buf;
    int64_t N = 0, head_rows = 0;
    int T = 0;
    LayerAct a{};
    float *qkv = nullptr, *tmp_d = nullptr, *lnf_rstd = nullptr, *logits = nullptr,
          *rows_mm = nullptr, *cos_t = nullptr, *sin_t = nullptr, *loss = nullptr,
          *x0 = nullptr;  // the embedding output, kept for the skips
    int32_t *tok = nullptr, *tgt = nullptr, *argmax = nullptr, *big = nullptr;
  } inf;

  // Plans one block's activations for N rows (`carve(&ptr, floats)`); the attention log-sum-exp
  // only when a backward will read it.
  template <typename Carve>
  void carve_layer(LayerAct& a, int64_t N, Carve&& carve, bool for_backward) {
    carve(&a.x, N * d);
    carve(&a.mid, N * d);
    carve(&a.ln1_rstd, N);
    carve(&a.ln1_mm, N * d);
    if (cfg.qk_norm) {  // the fused head stage writes the pre-norm heads and their rstd
      carve(&a.qraw, N * qw);
      carve(&a.kraw, N * kvw);
      carve(&a.q_rstd, N * H);
      carve(&a.k_rstd, N * Hkv);
    } else {
      a.qraw = a.kraw = a.q_rstd = a.k_rstd = nullptr;
    }
    carve(&a.q, N * qw);
    carve(&a.k, N * kvw);
    carve(&a.v, N * kvw);
    carve(&a.o, N * qw);
    if (for_backward) carve(&a.lse, N * H);
    else a.lse = nullptr;
    carve(&a.att_mm, N * qw);
    carve(&a.ln2_rstd, N);
    carve(&a.ln2_mm, N * d);
    carve(&a.h, N * hw);
    carve(&a.act_mm, N * Hd);
  }

  // Allocates params, grads, the bf16 mirror, the activation arena and io as `layout` says (after
  // refusing a layout larger than the device) and points every Param and view into them.
  void build();
  void bind_activations();
  // One block on N rows: x -> xout (may be the same buffer). Without segments, the rows are B x T
  // training rows and attention runs over the block's own keys; with segments (inference), each
  // segment's keys/values go into its area of kc/vc and its queries attend over that area.
  void block_fwd(const LayerOff& lo, LayerAct& a, const int32_t* tok, float* xout, float* qkv_buf, float* tmp,
                 int64_t N, int B, int T, const std::vector<KVSegment>* segs, float* kc, float* vc,
                 const float* cos_tab, const float* sin_tab);
  void body_fwd(const int32_t* in, int B, int T);
  // The multi-token head of a training forward (after the next-token head has written dxf):
  // its loss against the token after next within each row, the head's and mtp_proj's weight
  // gradients (into head_dw and mtp_dw) and its input gradient added to dxf, all scaled by
  // mtp_weight / (positions with a target). Returns the mean loss (nats).
  double mtp_fwd(const int32_t* targets, int B, int T);
  // The LM head over N rows of `x_mm` (matmul precision), in chunks of chunk_rows so the logits
  // stay small: softcapped cross-entropy against `tgt` (device; null = none; per-token loss and
  // argmax into `loss`/`amax` when not null); with grad, its gradient scaled by gscale goes
  // straight on, into dx (=, fp32 [N, d]) and head_dw (+=). `names`: the profiler's four op names.
  // Returns the summed loss.
  struct HeadNames {
    const char *fwd, *xent, *dx, *dw;
  };
  double head_chunks(const HeadNames& names, const float* x_mm, const int32_t* tgt, int64_t N, float* loss,
                     int32_t* amax, bool grad, float gscale, float* dx);
  void infer_reserve(int64_t N, int T);
};

void GPTImpl::build() {
  const ModelLayout& l = layout;
  act = activation_from_name(cfg.activation);
  prec = resolve_precision(cfg.matmul_precision, *be);
  d = l.d; H = l.H; Hkv = l.Hkv; hd = l.hd; L = l.L; V = l.V; Vp = l.Vp; Hd = l.Hd;
  qw = l.qw; kvw = l.kvw; qkvw = l.qkvw; hw = l.hw;
  loff = l.layers;
  off_wte = l.wte; off_big = l.bigram; off_fg = l.final_gain; off_head = l.head; off_mtp = l.mtp;
  nparams = l.param_floats;
  chunk_rows = l.act.chunk_rows;

  check_fits_memory(*be, l.bytes, fmt::format("the model (B={} x T={})", max_B, max_T));
  P = DeviceBuffer(*be, size_t(nparams) * 4);
  G = DeviceBuffer(*be, size_t(nparams) * 4);
  Wb = DeviceBuffer(*be, size_t(nparams) * 2);
  for (const ParamSlot& s : l.params) {
    Param p;
    p.name = s.name;
    p.shape = s.shape;
    p.kind = s.kind;
    p.data = P.as<float>() + s.offset;
    p.grad = G.as<float>() + s.offset;
    p.backend = be;
    params.push_back(std::move(p));
  }
  A = DeviceBuffer(*be, size_t(l.act.floats) * 4);
  bind_activations();
  be->rope_tables(cos_t, sin_t, max_T, hd, cfg.rope_base);
  const int64_t s = l.act.io_stride;
  io = DeviceBuffer(*be, size_t(s) * 4 * size_t(l.act.io_arrays));
  tok_d = io.as<int32_t>();
  tgt_d = tok_d + s;
  argmax_d = tgt_d + s;
  loss_d = reinterpret_cast<float*>(argmax_d + s);
  big_d = reinterpret_cast<int32_t*>(loss_d + s);
  if (off_mtp >= 0) tgt2_d = big_d + s;
}

void GPTImpl::bind_activations() {
  const ActivationPlan& a = layout.act;
  float* base = A.as<float>();
  auto at = [base](int64_t off) { return off >= 0 ? base + off : nullptr; };
  la.resize(size_t(L));
  for (int i = 0; i < L; ++i) {
    const BlockActs& b = a.blocks[size_t(i)];
    LayerAct& v = la[size_t(i)];
    v.x = at(b.x), v.xpre = at(b.xpre), v.mid = at(b.mid), v.ln1_rstd = at(b.ln1_rstd), v.ln1_mm = at(b.ln1_mm);
    v.qraw = at(b.qraw), v.kraw = at(b.kraw), v.q_rstd = at(b.q_rstd), v.k_rstd = at(b.k_rstd);
    v.q = at(b.q), v.k = at(b.k), v.v = at(b.v), v.o = at(b.o), v.lse = at(b.lse), v.att_mm = at(b.att_mm);
    v.ln2_rstd = at(b.ln2_rstd), v.ln2_mm = at(b.ln2_mm), v.h = at(b.h), v.act_mm = at(b.act_mm);
  }
  dx0 = at(a.dx0), x_final = at(a.x_final), lnf_rstd = at(a.lnf_rstd), lnf_mm = at(a.lnf_mm), dxf = at(a.dxf);
  head_dw = at(a.head_dw), logits = at(a.logits), logits_mm = at(a.logits_mm);
  tmp_d = at(a.tmp_d), tmp_mm = at(a.tmp_mm), qkv = at(a.qkv), dres = at(a.dres);
  dtmp = at(a.dtmp), dtmp2 = at(a.dtmp2), dmm = at(a.dmm), dq = at(a.dq), dk = at(a.dk), dv = at(a.dv);
  cos_t = at(a.cos_t), sin_t = at(a.sin_t);
  mtp_u = at(a.mtp_u), mtp_un = at(a.mtp_un), mtp_rstd = at(a.mtp_rstd), mtp_dw = at(a.mtp_dw);
}

#define PROF(name, phase, fl, by) ProfScope _ps_##__LINE__(prof, name, phase, double(fl), double(by))

void GPTImpl::block_fwd(const LayerOff& lo, LayerAct& a, const int32_t* tok, float* xout, float* qkv_buf,
                        float* tmp, int64_t N, int B_, int T_, const std::vector<KVSegment>* segs, float* kc,
                        float* vc, const float* cos_tab, const float* sin_tab) {
  const float eps = cfg.norm_eps;
  const int mmb = prec == MatPrec::BF16 ? 2 : 4;
  {
    PROF("rmsnorm.attn", "fwd", 4.0 * N * d, (8.0 + mmb) * N * d);
    norm_to_mm(a.x, lo.attn_g, a.ln1_mm, a.ln1_rstd, N);
  }
  {
    PROF("matmul.qkv", "fwd", 2.0 * N * d * qkvw, mmb * (N * d + int64_t(qkvw) * d) + 4.0 * N * qkvw);
    be->linear_fwd(prec, a.ln1_mm, w(lo.wqkv), qkv_buf, N, d, qkvw);
  }
  if (!segs) {
    {
      PROF("qk_norm.rope", "fwd", 10.0 * N * (qw + kvw), 4.0 * N * (qkvw * 2 + qw + kvw));
      be->qkv_heads_fwd(qkv_buf, B_, T_, H, Hkv, hd, cfg.qk_norm, pp(lo.qn_g), pp(lo.kn_g), eps, cos_tab,
                        sin_tab, a.qraw, a.kraw, a.q_rstd, a.k_rstd, a.q, a.k, a.v);
    }
    if (lo.ve >= 0) {  // qkv_buf is free now: the embedding rows, then their heads layout
      PROF("value_embed", "fwd", N * kvw, 20.0 * N * kvw);
      be->embedding_fwd(tok, P.as<float>() + lo.ve, qkv_buf, N, kvw);
      be->split_heads(qkv_buf, kvw, qkv_buf + N * kvw, B_, T_, Hkv, hd);
      be->axpy(a.v, 1.0f, qkv_buf + N * kvw, N * kvw);
    }
    {
      PROF("attention", "fwd", 4.0 * B_ * H * hd * double(T_) * mean_attended_keys(T_, cfg.attn_window),
           4.0 * N * (2 * qw + 2 * kvw));
      be->attention_fwd(a.q, a.k, a.v, a.o, a.lse, B_, H, Hkv, T_, T_, T_, hd, cfg.attn_window);
    }
    {
      PROF("merge_heads", "fwd", 0, (4.0 + mmb) * N * qw);
      be->merge_heads(a.o, a.att_mm, mmt(), qw, B_, T_, H, hd);
    }
  } else {
    PROF("attention.cached", "fwd", 0, 0);
    // Value embedding rows of all N tokens in tmp (free until the output projection), each segment's
    // in heads layout after them.
    if (lo.ve >= 0) be->embedding_fwd(tok, P.as<float>() + lo.ve, tmp, N, kvw);
    for (const KVSegment& sg : *segs) {
      // The fused head stage on the segment's rows, with RoPE tables shifted to its first position.
      const int64_t rope_off = int64_t(sg.pos0) * (hd / 2);
      be->qkv_heads_fwd(qkv_buf + sg.off * qkvw, 1, sg.n, H, Hkv, hd, cfg.qk_norm, pp(lo.qn_g), pp(lo.kn_g), eps,
                        cos_tab + rope_off, sin_tab + rope_off, a.qraw ? a.qraw + sg.off * qw : nullptr,
                        a.kraw ? a.kraw + sg.off * kvw : nullptr, a.q_rstd ? a.q_rstd + sg.off * H : nullptr,
                        a.k_rstd ? a.k_rstd + sg.off * Hkv : nullptr, a.q + sg.off * qw, a.k + sg.off * kvw,
                        a.v + sg.off * kvw);
      if (lo.ve >= 0) {
        be->split_heads(tmp + sg.off * kvw, kvw, tmp + N * kvw, 1, sg.n, Hkv, hd);
        be->axpy(a.v + sg.off * kvw, 1.0f, tmp + N * kvw, int64_t(sg.n) * kvw);
      }
      for (int hh = 0; hh < Hkv; ++hh) {  // keys/values into the cache area at [pos0, pos0 + n)
        const int64_t from = sg.off * kvw + int64_t(hh) * sg.n * hd;
        const int64_t to = sg.cache + (int64_t(hh) * sg.ldT + sg.pos0) * hd;
        be->copy(kc + to, a.k + from, sizeof(float) * sg.n * hd);
        be->copy(vc + to, a.v + from, sizeof(float) * sg.n * hd);
      }
      be->attention_fwd(a.q + sg.off * qw, kc + sg.cache, vc + sg.cache, a.o + sg.off * qw, nullptr, 1, H, Hkv,
                        sg.n, sg.pos0 + sg.n, sg.ldT, hd, cfg.attn_window);
      be->merge_heads(a.o + sg.off * qw, reinterpret_cast<char*>(a.att_mm) + sg.off * qw * mmb, mmt(), qw, 1,
                      sg.n, H, hd);
    }
  }
  {
    PROF("matmul.wo", "fwd", 2.0 * N * qw * d, mmb * (N * qw + int64_t(qw) * d) + 4.0 * N * d);
    be->linear_fwd(prec, a.att_mm, w(lo.wo), tmp, N, qw, d);
  }
  {
    PROF("residual", "fwd", N * d, 12.0 * N * d);
    be->residual_fwd(a.x, tmp, a.mid, N * d);
  }
  {
    PROF("rmsnorm.mlp", "fwd", 4.0 * N * d, (8.0 + mmb) * N * d);
    norm_to_mm(a.mid, lo.mlp_g, a.ln2_mm, a.ln2_rstd, N);
  }
  {
    PROF("matmul.mlp_in", "fwd", 2.0 * N * d * hw, mmb * (N * d + int64_t(hw) * d) + 4.0 * N * hw);
    be->linear_fwd(prec, a.ln2_mm, w(lo.w_in), a.h, N, d, hw);
  }
  {
    PROF("activation", "fwd", 8.0 * N * Hd, (4.0 * hw + mmb * Hd + 4.0 * Hd) * N);
    be->activation_fwd(act, a.h, a.act_mm, mmt(), N, Hd);
  }
  {
    PROF("matmul.mlp_out", "fwd", 2.0 * N * Hd * d, mmb * (N * Hd + int64_t(Hd) * d) + 4.0 * N * d);
    be->linear_fwd(prec, a.act_mm, w(lo.w_out), tmp, N, Hd, d);
  }
  {
    PROF("residual", "fwd", N * d, 12.0 * N * d);
    be->residual_fwd(a.mid, tmp, xout, N * d);
  }
}

void GPTImpl::body_fwd(const int32_t* in, int B_, int T_) {
  // The arena holds max_B * max_T tokens of every activation (only the RoPE tables have max_T
  // rows), so any B x T of at most that many tokens fits: the training loop's shorter rows
  // (train.seq_schedule) are the same tokens cut into more rows.
  if (B_ <= 0 || T_ <= 0 || T_ > max_T || int64_t(B_) * T_ > int64_t(max_B) * max_T)
    fail("GPT forward: batch {}x{} exceeds the allocated {}x{} tokens", B_, T_, max_B, max_T);
  B = B_;
  T = T_;
  const int64_t N = int64_t(B) * T;
  for (int64_t i = 0; i < N; ++i)
    if (in[i] < 0 || in[i] >= V) fail("GPT forward: token id {} out of range [0, {})", in[i], V);
  be->to_device(tok_d, in, sizeof(int32_t) * N);
  refresh_bf16();
  const int mmb = prec == MatPrec::BF16 ? 2 : 4;
  {
    PROF("embedding", "fwd", 0, 8.0 * N * d);
    be->embedding_fwd(tok_d, P.as<float>() + off_wte, la[0].x, N, d);
  }
  if (off_big >= 0) {  // each training row starts without a previous token
    std::vector<int32_t> rows(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) rows[size_t(i)] = bigram_row(i % T == 0 ? -1 : in[i - 1], in[i], cfg.bigram_buckets);
    add_bigram(rows, big_d, la[0].x, tmp_d);
  }
  for (int l = 0; l < L; ++l) {
    const bool skip = l + 1 < L && loff[l + 1].x0 >= 0;  // the next block's input mixes in x0
    block_fwd(loff[l], la[l], tok_d, l + 1 == L ? x_final : skip ? la[l + 1].xpre : la[l + 1].x, qkv, tmp_d, N,
              B, T, nullptr, nullptr, nullptr, cos_t, sin_t);
    if (skip) {
      PROF("x0_skip", "fwd", 3.0 * N * d, 12.0 * N * d);
      be->mix2_fwd(la[l + 1].xpre, la[0].x, pp(loff[l + 1].x0), la[l + 1].x, N * d);
    }
  }
  {
    PROF("rmsnorm.final", "fwd", 4.0 * N * d, (8.0 + mmb) * N * d);
    norm_to_mm(x_final, off_fg, lnf_mm, lnf_rstd, N);
  }
}

void GPTImpl::infer_reserve(int64_t N, int T_) {
  const int64_t head_rows = std::max<int64_t>(1, std::min<int64_t>(N, (int64_t(1) << 22) / Vp));
  if (N <= inf.N && T_ <= inf.T && inf.buf.bytes() > 0) return;
  N = std::max(N, inf.N);
  T_ = std::max(T_, inf.T);
  const int64_t hr = std::max(head_rows, inf.head_rows);
  const int64_t wmax = std::max<int64_t>({d, qkvw, hw, Hd, qw});
  std::vector<std::pair<float**, int64_t>> plan;
  int64_t total = 0;
  auto carve = [&](float** dst, int64_t n) { plan.push_back({dst, round16(n)}); total += round16(n); };
  carve_layer(inf.a, N, carve, false);  // no log-sum-exp: no backward follows
  carve(&inf.qkv, N * qkvw);
  carve(&inf.tmp_d, N * wmax);
  carve(&inf.lnf_rstd, N);
  carve(&inf.logits, hr * Vp);
  carve(&inf.rows_mm, hr * d);
  carve(&inf.cos_t, int64_t(T_) * hd / 2);
  carve(&inf.sin_t, int64_t(T_) * hd / 2);
  carve(&inf.loss, N);
  if (cfg.x0_skips) carve(&inf.x0, N * d);
  float *tok = nullptr, *tgt = nullptr, *am = nullptr, *big = nullptr;
  carve(&tok, N);  // int32 buffers carved as floats (same size)
  carve(&tgt, N);
  carve(&am, N);
  carve(&big, N);
  inf.buf = DeviceBuffer(*be, size_t(total) * 4);
  int64_t o = 0;
  for (auto& [dst, n] : plan) {
    *dst = inf.buf.as<float>() + o;
    o += n;
  }
  inf.tok = reinterpret_cast<int32_t*>(tok);
  inf.big = reinterpret_cast<int32_t*>(big);
  inf.tgt = reinterpret_cast<int32_t*>(tgt);
  inf.argmax = reinterpret_cast<int32_t*>(am);
  be->rope_tables(inf.cos_t, inf.sin_t, T_, hd, cfg.rope_base);
  inf.N = N;
  inf.T = T_;
  inf.head_rows = hr;
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

float GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T, float* token_loss,
                   int32_t* argmax) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  m.have_fwd = false;
  m.body_fwd(inputs, B, T);
  const int64_t N = int64_t(B) * T;
  const int d = m.d, V = m.V, Vp = m.Vp;
  int64_t valid = 0;
  if (targets) {
    for (int64_t i = 0; i < N; ++i) {
      if (targets[i] >= V) fail("GPT forward: target id {} out of range [0, {})", targets[i], V);
      valid += targets[i] >= 0;
    }
    be.to_device(m.tgt_d, targets, sizeof(int32_t) * N);
  }
  const bool grad = m.grad_enabled && targets != nullptr;
  const float gscale = valid > 0 ? 1.0f / float(valid) : 0.0f;
  if (grad) be.zero(m.head_dw, sizeof(float) * int64_t(Vp) * d);
  const double total =
      m.head_chunks({"matmul.head", "softcap_xent", "matmul.head.dx", "matmul.head.dw"}, m.lnf_mm,
                    targets ? m.tgt_d : nullptr, N, token_loss ? m.loss_d : nullptr, argmax ? m.argmax_d : nullptr,
                    grad, gscale, m.dxf);
  if (token_loss) {
    if (targets) be.to_host(token_loss, m.loss_d, sizeof(float) * N);
    else std::fill(token_loss, token_loss + N, 0.0f);
  }
  if (argmax) be.to_host(argmax, m.argmax_d, sizeof(int32_t) * N);
  float mean = valid > 0 ? float(total / double(valid)) : 0.0f;
  if (!std::isfinite(mean)) throw NonFiniteError(fmt::format("GPT forward: loss is not finite ({})", mean));
  m.last_mtp = 0;
  if (grad && m.off_mtp >= 0) {
    m.last_mtp = float(m.mtp_fwd(targets, B, T));
    if (!std::isfinite(m.last_mtp))
      throw NonFiniteError(fmt::format("GPT forward: multi-token loss is not finite ({})", m.last_mtp));
  }
  m.have_fwd = true;
  m.fwd_had_grad = grad;
  return mean;
}

double GPTImpl::mtp_fwd(const int32_t* targets, int B_, int T_) {
  const int64_t N = int64_t(B_) * T_;
  const int mmb = prec == MatPrec::BF16 ? 2 : 4;
  // Position t of a row predicts the target of position t + 1 (the token after next); the last
  // position of each row has none.
  std::vector<int32_t> tgt2(size_t(N), -1);
  int64_t valid = 0;
  for (int b = 0; b < B_; ++b)
    for (int t = 0; t + 1 < T_; ++t) {
      const int64_t i = int64_t(b) * T_ + t;
      tgt2[size_t(i)] = targets[i + 1];
      valid += targets[i + 1] >= 0;
    }
  be->to_device(tgt2_d, tgt2.data(), sizeof(int32_t) * N);
  const float gscale = valid > 0 ? cfg.mtp_weight / float(valid) : 0.0f;
  {
    ProfScope ps(prof, "matmul.mtp_proj", "fwd", 2.0 * N * d * d, mmb * (2.0 * N * d + double(d) * d));
    be->linear_fwd(prec, lnf_mm, w(off_mtp), mtp_u, N, d, d);
  }
  {
    ProfScope ps(prof, "rmsnorm.mtp", "fwd", 4.0 * N * d, (4.0 + mmb) * N * d);
    norm_to_mm(mtp_u, -1, mtp_un, mtp_rstd, N);
  }
  // The head, as for the next-token loss; the gradient of its normed input goes into dtmp.
  float* dun = dtmp;
  const double total = head_chunks({"matmul.mtp_head", "softcap_xent.mtp", "matmul.mtp_head.dx", "matmul.mtp_head.dw"},
                                   mtp_un, tgt2_d, N, nullptr, nullptr, true, gscale, dun);
  {
    ProfScope ps(prof, "rmsnorm.mtp", "bwd", 8.0 * N * d, 16.0 * N * d);
    be->zero(dtmp2, sizeof(float) * N * d);
    be->rmsnorm_bwd(mtp_u, nullptr, mtp_rstd, dun, dtmp2, nullptr, N, d);
  }
  const void* du = mm_input(dtmp2, dmm, N * d);
  {
    ProfScope ps(prof, "matmul.mtp_proj.dw", "bwd", 2.0 * N * d * d, mmb * 2.0 * N * d + 8.0 * d * d);
    be->zero(mtp_dw, sizeof(float) * int64_t(d) * d);
    be->linear_bwd_weight(prec, du, lnf_mm, mtp_dw, N, d, d);
  }
  {
    ProfScope ps(prof, "matmul.mtp_proj.dx", "bwd", 2.0 * N * d * d, mmb * (N * d + double(d) * d) + 8.0 * N * d);
    be->linear_bwd_input(prec, du, w(off_mtp), dxf, N, d, d, true);  // onto the next-token head's
  }
  return valid > 0 ? total / double(valid) : 0.0;
}

double GPTImpl::head_chunks(const HeadNames& names, const float* x_mm, const int32_t* tgt, int64_t N, float* loss,
                            int32_t* amax, bool grad, float gscale, float* dx) {
  const int mmb = prec == MatPrec::BF16 ? 2 : 4;
  double total = 0;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t nr = std::min<int64_t>(chunk_rows, N - r0);
    const float* xin = x_mm + r0 * d * mmb / 4;
    {
      ProfScope ps(prof, names.fwd, "fwd", 2.0 * nr * d * Vp, mmb * (nr * d + double(Vp) * d) + 4.0 * nr * Vp);
      be->linear_fwd(prec, xin, w(off_head), logits, nr, d, Vp);
    }
    {
      ProfScope ps(prof, names.xent, "fwd", 30.0 * nr * V, 8.0 * nr * Vp);
      total += be->softcap_xent(logits, tgt ? tgt + r0 : nullptr, nr, V, Vp, cfg.logit_softcap,
                                loss ? loss + r0 : nullptr, amax ? amax + r0 : nullptr, grad, gscale);
    }
    if (!grad) continue;
    const void* dlogits = mm_input(logits, logits_mm, nr * Vp);
    {
      ProfScope ps(prof, names.dx, "bwd", 2.0 * nr * d * Vp, mmb * (nr * Vp + double(Vp) * d) + 4.0 * nr * d);
      be->linear_bwd_input(prec, dlogits, w(off_head), dx + r0 * d, nr, d, Vp, false);
    }
    {
      ProfScope ps(prof, names.dw, "bwd", 2.0 * nr * d * Vp, mmb * (nr * Vp + nr * d) + 8.0 * Vp * d);
      be->linear_bwd_weight(prec, dlogits, xin, head_dw, nr, d, Vp);
    }
  }
  return total;
}

float GPT::mtp_loss() const { return impl->last_mtp; }

void GPT::backward(float loss_scale) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  Profiler* prof = m.prof;
  if (!m.have_fwd || !m.fwd_had_grad)
    fail("GPT backward: no forward with targets and gradients enabled precedes it");
  m.have_fwd = false;
  const int B = m.B, T = m.T, d = m.d, H = m.H, Hkv = m.Hkv, hd = m.hd, Hd = m.Hd;
  const int qw = m.qw, kvw = m.kvw, qkvw = m.qkvw, hw = m.hw;
  const int64_t N = int64_t(B) * T;
  const MatPrec prec = m.prec;
  const DType mmt = m.mmt();
  const int mmb = prec == MatPrec::BF16 ? 2 : 4;
  float* G = m.G.as<float>();
  // Backward of y = x W^T (x: [N, in] in matmul precision, W at G/P offset w_off: [out, in]) from
  // dy (matmul precision): dW += dy^T x, then m.dtmp = dy W. Each half is timed as its own op.
  auto matmul_bwd = [&](const char* dw_name, const char* dx_name, const void* dy, const void* x_mm,
                        int64_t w_off, int in, int out) {
    {
      PROF(dw_name, "bwd", 2.0 * N * in * out, mmb * N * (in + out) + 8.0 * in * out);
      be.linear_bwd_weight(prec, dy, x_mm, G + w_off, N, in, out);
    }
    {
      PROF(dx_name, "bwd", 2.0 * N * in * out, mmb * (N * out + int64_t(in) * out) + 4.0 * N * in);
      be.linear_bwd_input(prec, dy, m.w(w_off), m.dtmp, N, in, out, false);
    }
  };
  {
    PROF("head.grad_accum", "bwd", 2.0 * m.Vp * d, 12.0 * m.Vp * d);
    be.axpy(G + m.off_head, loss_scale, m.head_dw, int64_t(m.Vp) * d);
    if (m.off_mtp >= 0) be.axpy(G + m.off_mtp, loss_scale, m.mtp_dw, int64_t(d) * d);
  }
  {
    PROF("rmsnorm.final", "bwd", 8.0 * N * d, 20.0 * N * d);
    be.scale(m.dxf, loss_scale, N * d);
    be.zero(m.dres, sizeof(float) * N * d);
    be.rmsnorm_bwd(m.x_final, m.pp(m.off_fg), m.lnf_rstd, m.dxf, m.dres, m.gp(m.off_fg), N, d);
  }
  if (m.dx0) be.zero(m.dx0, sizeof(float) * N * d);
  for (int l = m.L - 1; l >= 0; --l) {
    LayerAct& a = m.la[l];
    const LayerOff& lo = m.loff[l];
    // ---- MLP branch: xout = mid + W_out act(W_in norm(mid)) ----
    matmul_bwd("matmul.mlp_out.dw", "matmul.mlp_out.dx", m.mm_input(m.dres, m.dmm, N * d), a.act_mm, lo.w_out, Hd,
               d);
    {
      PROF("activation", "bwd", 12.0 * N * Hd, (4.0 * hw * 2 + 4.0 * Hd) * N);
      be.activation_bwd(m.act, a.h, m.dtmp, m.dmm, mmt, N, Hd);
    }
    matmul_bwd("matmul.mlp_in.dw", "matmul.mlp_in.dx", m.dmm, a.ln2_mm, lo.w_in, d, hw);
    {
      PROF("rmsnorm.mlp", "bwd", 8.0 * N * d, 16.0 * N * d);
      be.rmsnorm_bwd(a.mid, m.pp(lo.mlp_g), a.ln2_rstd, m.dtmp, m.dres, m.gp(lo.mlp_g), N, d);
    }
    // ---- attention branch: mid = x + W_o attn(rope(qknorm(W_qkv norm(x)))) ----
    matmul_bwd("matmul.wo.dw", "matmul.wo.dx", m.mm_input(m.dres, m.dmm, N * d), a.att_mm, lo.wo, qw, d);
    {
      PROF("attention", "bwd", 10.0 * B * H * hd * double(T) * mean_attended_keys(T, m.cfg.attn_window),
           4.0 * N * (4 * qw + 4 * kvw));
      be.split_heads(m.dtmp, qw, m.dtmp2, B, T, H, hd);  // dO in [B,H,T,hd]
      be.attention_bwd(a.q, a.k, a.v, a.o, a.lse, m.dtmp2, m.dq, m.dk, m.dv, B, H, Hkv, T, hd, m.cfg.attn_window);
    }
    if (lo.ve >= 0) {  // v = W_v x + ve[tok]: the table's rows get dv, back in token-row layout
      PROF("value_embed", "bwd", N * kvw, 20.0 * N * kvw);
      be.merge_heads(m.dv, m.dtmp2, DType::F32, kvw, B, T, Hkv, hd);
      be.embedding_bwd(m.tok_d, m.dtmp2, G + lo.ve, N, kvw);
    }
    {
      PROF("qk_norm.rope", "bwd", 12.0 * N * (qw + kvw), 4.0 * N * (3 * qw + 3 * kvw + qkvw));
      be.qkv_heads_bwd(m.dq, m.dk, m.dv, a.qraw, a.kraw, a.q_rstd, a.k_rstd, m.pp(lo.qn_g), m.pp(lo.kn_g),
                       m.gp(lo.qn_g), m.gp(lo.kn_g), B, T, H, Hkv, hd, m.cfg.qk_norm, m.cos_t, m.sin_t,
                       m.dmm, mmt);
    }
    matmul_bwd("matmul.qkv.dw", "matmul.qkv.dx", m.dmm, a.ln1_mm, lo.wqkv, d, qkvw);
    {
      PROF("rmsnorm.attn", "bwd", 8.0 * N * d, 16.0 * N * d);
      be.rmsnorm_bwd(a.x, m.pp(lo.attn_g), a.ln1_rstd, m.dtmp, m.dres, m.gp(lo.attn_g), N, d);
    }
    if (lo.x0 >= 0) {  // x = a xpre + b x0: dres becomes the previous block's output gradient
      PROF("x0_skip", "bwd", 6.0 * N * d, 24.0 * N * d);
      be.mix2_bwd(m.dres, a.xpre, m.la[0].x, m.pp(lo.x0), m.dres, m.dx0, G + lo.x0, N * d);
    }
  }
  if (m.dx0) be.axpy(m.dres, 1.0f, m.dx0, N * d);  // the embedding output's gradient through the skips
  {
    PROF("embedding", "bwd", N * d, 12.0 * N * d);
    be.embedding_bwd(m.tok_d, m.dres, G + m.off_wte, N, d);
    if (m.off_big >= 0) be.embedding_bwd(m.big_d, m.dres, G + m.off_big, N, d);  // rows of the forward
  }
  m.bf16_dirty = true;  // an optimizer step normally follows
}

void GPT::zero_grad() {
  impl->be->zero(impl->G.as<float>(), sizeof(float) * impl->nparams);
  impl->bf16_dirty = true;
}

void GPT::last_logits(const int32_t* inputs, int B, int T, float* out) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  Profiler* prof = m.prof;
  m.have_fwd = false;
  m.body_fwd(inputs, B, T);
  const int d = m.d, Vp = m.Vp;
  const int mmb = m.prec == MatPrec::BF16 ? 2 : 4;
  // gather the last row of each sequence (matmul-precision rows are d*mmb bytes)
  char* rows = reinterpret_cast<char*>(m.tmp_mm);
  const char* src = reinterpret_cast<const char*>(m.lnf_mm);
  for (int b = 0; b < B; ++b)
    be.copy(rows + int64_t(b) * d * mmb, src + (int64_t(b) * T + T - 1) * d * mmb, size_t(d) * mmb);
  for (int b0 = 0; b0 < B; b0 += int(m.chunk_rows)) {  // the logits buffer holds chunk_rows rows
    const int nb = int(std::min<int64_t>(m.chunk_rows, B - b0));
    {
      PROF("matmul.head", "fwd", 2.0 * nb * d * Vp, mmb * (nb * d + int64_t(Vp) * d) + 4.0 * nb * Vp);
      be.linear_fwd(m.prec, rows + int64_t(b0) * d * mmb, m.w(m.off_head), m.logits, nb, d, Vp);
    }
    be.softcap_fwd(m.logits, int64_t(nb) * Vp, m.cfg.logit_softcap);
    be.to_host(out + int64_t(b0) * Vp, m.logits, sizeof(float) * int64_t(nb) * Vp);
  }
  for (int b = 0; b < B; ++b)
    for (int j = m.V; j < Vp; ++j) out[int64_t(b) * Vp + j] = -INFINITY;
}

// ---- inference with a KV cache ------------------------------------------------------------------
KVCache::KVCache(Backend& be, int n_layer, int64_t floats, bool shared)
    : be_(&be), n_layer_(n_layer), shared_(shared) {
  reserve(floats);
}

void KVCache::reserve(int64_t floats) {
  if (floats <= floats_) return;
  const int copies = shared_ ? 1 : n_layer_;
  k_ = DeviceBuffer(*be_, size_t(floats) * copies * 4);
  v_ = DeviceBuffer(*be_, size_t(floats) * copies * 4);
  floats_ = floats;
}

void* KVCache::hidden_for(int64_t rows, size_t row_bytes) {
  if (size_t(rows) * row_bytes > hidden_.bytes()) hidden_ = DeviceBuffer(*be_, size_t(rows) * row_bytes);
  hidden_rows_ = rows;
  return hidden_.as<void>();
}

float* KVCache::k(int layer) const { return k_.as<float>() + (shared_ ? 0 : int64_t(layer) * floats_); }
float* KVCache::v(int layer) const { return v_.as<float>() + (shared_ ? 0 : int64_t(layer) * floats_); }

void GPT::forward_cached(const int32_t* tokens, int64_t N, const std::vector<KVSegment>& segs, KVCache& cache,
                         int max_pos) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  Profiler* prof = m.prof;
  m.have_fwd = false;  // nothing is kept for a backward
  if (N <= 0) fail("GPT cached forward: no tokens");
  for (int64_t i = 0; i < N; ++i)
    if (tokens[i] < 0 || tokens[i] >= m.V) fail("GPT cached forward: token id {} out of range [0, {})", tokens[i], m.V);
  int64_t covered = 0;
  for (const KVSegment& sg : segs) {
    if (sg.n <= 0 || sg.off < 0 || sg.off + sg.n > N || sg.pos0 < 0 || sg.pos0 + sg.n > sg.ldT ||
        sg.pos0 + sg.n > max_pos || sg.cache < 0 || sg.cache + int64_t(m.Hkv) * sg.ldT * m.hd > cache.floats())
      fail("GPT cached forward: a segment of {} tokens at position {} does not fit its cache area", sg.n, sg.pos0);
    if (m.off_big >= 0 && sg.pos0 > 0 && (sg.prev < 0 || sg.prev >= m.V))
      fail("GPT cached forward: a segment at position {} lacks its previous token (token {}), which the "
           "bigram embedding reads", sg.pos0, sg.prev);
    covered += sg.n;
  }
  if (covered != N) fail("GPT cached forward: segments cover {} of {} tokens", covered, N);
  m.infer_reserve(N, max_pos);
  m.refresh_bf16();
  const int mmb = m.prec == MatPrec::BF16 ? 2 : 4;
  const int d = m.d;
  LayerAct& a = m.inf.a;
  be.to_device(m.inf.tok, tokens, sizeof(int32_t) * N);
  {
    PROF("embedding", "fwd", 0, 8.0 * N * d);
    be.embedding_fwd(m.inf.tok, m.P.as<float>() + m.off_wte, a.x, N, d);
  }
  if (m.off_big >= 0) {
    std::vector<int32_t> rows(static_cast<size_t>(N));
    for (const KVSegment& sg : segs)
      for (int i = 0; i < sg.n; ++i) {
        const int32_t prev = i > 0 ? tokens[sg.off + i - 1] : sg.pos0 > 0 ? sg.prev : -1;
        rows[size_t(sg.off + i)] = bigram_row(prev, tokens[sg.off + i], m.cfg.bigram_buckets);
      }
    m.add_bigram(rows, m.inf.big, a.x, m.inf.tmp_d);
  }
  if (m.inf.x0) be.copy(m.inf.x0, a.x, sizeof(float) * N * d);
  for (int l = 0; l < m.L; ++l) {
    if (m.loff[l].x0 >= 0) {
      PROF("x0_skip", "fwd", 3.0 * N * d, 12.0 * N * d);
      be.mix2_fwd(a.x, m.inf.x0, m.pp(m.loff[l].x0), a.x, N * d);
    }
    m.block_fwd(m.loff[l], a, m.inf.tok, a.x, m.inf.qkv, m.inf.tmp_d, N, 1, 0, &segs, cache.k(l), cache.v(l),
                m.inf.cos_t, m.inf.sin_t);
  }
  {
    PROF("rmsnorm.final", "fwd", 4.0 * N * d, (8.0 + mmb) * N * d);
    m.norm_to_mm(a.x, m.off_fg, static_cast<float*>(cache.hidden_for(N, size_t(d) * mmb)), m.inf.lnf_rstd, N);
  }
}

namespace {
// Copies the listed rows of `src` (row size `row_bytes`) to consecutive rows of `dst`, on the device.
void gather_rows(Backend& be, const void* src, void* dst, const int64_t* rows, int64_t n, size_t row_bytes) {
  for (int64_t r = 0; r < n; ++r)
    be.copy(static_cast<char*>(dst) + r * row_bytes, static_cast<const char*>(src) + rows[r] * row_bytes, row_bytes);
}
}  // namespace

void GPT::cached_logits(const KVCache& cache, const int64_t* rows, int64_t n, float* out) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  Profiler* prof = m.prof;
  const int d = m.d, Vp = m.Vp;
  const int mmb = m.prec == MatPrec::BF16 ? 2 : 4;
  for (int64_t r = 0; r < n; ++r)
    if (rows[r] < 0 || rows[r] >= cache.hidden_rows()) fail("GPT cached logits: row {} outside the last forward", rows[r]);
  for (int64_t r0 = 0; r0 < n; r0 += m.inf.head_rows) {
    const int64_t nr = std::min<int64_t>(m.inf.head_rows, n - r0);
    gather_rows(be, cache.hidden(), m.inf.rows_mm, rows + r0, nr, size_t(d) * mmb);
    {
      PROF("matmul.head", "fwd", 2.0 * nr * d * Vp, mmb * (nr * d + int64_t(Vp) * d) + 4.0 * nr * Vp);
      be.linear_fwd(m.prec, m.inf.rows_mm, m.w(m.off_head), m.inf.logits, nr, d, Vp);
    }
    be.softcap_fwd(m.inf.logits, nr * Vp, m.cfg.logit_softcap);
    be.to_host(out + r0 * Vp, m.inf.logits, sizeof(float) * nr * Vp);
  }
  for (int64_t r = 0; r < n; ++r)
    for (int j = m.V; j < Vp; ++j) out[r * Vp + j] = -INFINITY;
}

void GPT::cached_score(const KVCache& cache, const int32_t* targets, float* loss, int32_t* argmax) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  Profiler* prof = m.prof;
  const int64_t N = cache.hidden_rows();
  const int d = m.d, V = m.V, Vp = m.Vp;
  const int mmb = m.prec == MatPrec::BF16 ? 2 : 4;
  std::vector<int64_t> at;
  for (int64_t i = 0; i < N; ++i) {
    loss[i] = 0.0f;
    argmax[i] = -1;
    if (targets[i] >= V) fail("GPT cached score: target id {} out of range [0, {})", targets[i], V);
    if (targets[i] >= 0) at.push_back(i);
  }
  std::vector<int32_t> tg(size_t(m.inf.head_rows)), am(tg.size());
  std::vector<float> lo(tg.size());
  for (size_t c0 = 0; c0 < at.size(); c0 += size_t(m.inf.head_rows)) {
    const int64_t nr = std::min<int64_t>(m.inf.head_rows, int64_t(at.size() - c0));
    gather_rows(be, cache.hidden(), m.inf.rows_mm, at.data() + c0, nr, size_t(d) * mmb);
    for (int64_t r = 0; r < nr; ++r) tg[size_t(r)] = targets[at[c0 + size_t(r)]];
    be.to_device(m.inf.tgt, tg.data(), sizeof(int32_t) * nr);
    {
      PROF("matmul.head", "fwd", 2.0 * nr * d * Vp, mmb * (nr * d + int64_t(Vp) * d) + 4.0 * nr * Vp);
      be.linear_fwd(m.prec, m.inf.rows_mm, m.w(m.off_head), m.inf.logits, nr, d, Vp);
    }
    {
      PROF("softcap_xent", "fwd", 30.0 * nr * V, 8.0 * nr * Vp);
      be.softcap_xent(m.inf.logits, m.inf.tgt, nr, V, Vp, m.cfg.logit_softcap, m.inf.loss, m.inf.argmax, false, 0.0f);
    }
    be.to_host(lo.data(), m.inf.loss, sizeof(float) * nr);
    be.to_host(am.data(), m.inf.argmax, sizeof(int32_t) * nr);
    for (int64_t r = 0; r < nr; ++r) {
      loss[at[c0 + size_t(r)]] = lo[size_t(r)];
      argmax[at[c0 + size_t(r)]] = am[size_t(r)];
    }
  }
}

std::vector<Param>& GPT::params() { return impl->params; }
float* GPT::grad_buffer() { return impl->G.as<float>(); }
int64_t GPT::grad_floats() const { return impl->nparams; }
float* GPT::grad_accumulator() {
  if (!impl->G_acc.as<float>()) impl->G_acc = DeviceBuffer(*impl->be, size_t(impl->nparams) * 4);
  return impl->G_acc.as<float>();
}
int64_t GPT::num_params() const { return impl->layout.num_params(); }
double GPT::flops_per_token(int T) const { return impl->layout.flops_per_token(T); }

const ModelConfig& GPT::config() const { return impl->cfg; }
void GPT::set_profiler(Profiler* p) {
  impl->prof = p;
  if (p && !impl->be->host_visible()) {  // asynchronous device: scopes wait for it (profiler.h)
    p->wait = [](void* be) { static_cast<Backend*>(be)->synchronize(); };
    p->wait_ctx = impl->be;
  }
}
void GPT::set_matmul_precision(MatPrec p) {
  impl->prec = p;
  impl->bf16_dirty = true;
}
MatPrec GPT::matmul_precision() const { return impl->prec; }
Backend& GPT::backend() const { return *impl->be; }
void GPT::set_grad_enabled(bool on) { impl->grad_enabled = on; }
void GPT::weights_changed() { impl->bf16_dirty = true; }

}  // namespace clm
