// Computes a ModelLayout from a ModelConfig: the parameter table in buffer order, the activation
// arena in carving order, the byte total and the counts that follow from them.
#include "model/layout.h"

#include <algorithm>

#include "core/common.h"

namespace clm {

int64_t ParamSlot::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

int64_t logits_row_stride(int64_t Vp) {
  const int64_t ld = align16(Vp);
  return (ld / kLayoutAlign) % 2 == 1 ? ld : ld + kLayoutAlign;
}

namespace {

void set_dims(ModelLayout& l) {
  const ModelConfig& c = l.cfg;
  l.d = c.d_model;
  l.H = c.n_head;
  l.Hkv = c.n_kv_head;
  l.hd = c.head_dim;
  l.L = std::max(c.n_layer, 0);
  l.V = c.vocab_size;
  l.Vp = c.padded_vocab();
  l.Hd = c.mlp_hidden();
  l.qw = l.H * l.hd;
  l.kvw = l.Hkv * l.hd;
  l.qkvw = l.qw + 2 * l.kvw;
  l.hw = c.activation == "swiglu" ? 2 * l.Hd : l.Hd;
}

// Appends parameter tensors at the end of the buffer; `adjacent` ones are not padded, so the next
// tensor follows them directly (one fused matmul), and pad() closes such a group.
struct ParamTable {
  ModelLayout& l;
  int64_t add(const std::string& name, std::vector<int64_t> shape, ParamKind kind, bool adjacent = false) {
    ParamSlot p{name, std::move(shape), kind, l.param_floats};
    l.param_floats += adjacent ? p.numel() : align16(p.numel());
    l.params.push_back(std::move(p));
    return l.params.back().offset;
  }
  void pad() { l.param_floats = align16(l.param_floats); }
};

void add_block(ModelLayout& l, ParamTable& t, int i) {
  const ModelConfig& c = l.cfg;
  const std::string pre = fmt::format("blocks.{}.", i);
  LayerOff& lo = l.layers[size_t(i)];
  if (c.x0_skips && i > 0) lo.x0 = t.add(pre + "x0_mix", {2}, ParamKind::Scalar);
  if (c.norm_gain) lo.attn_g = t.add(pre + "attn_norm.gain", {l.d}, ParamKind::Scalar);
  lo.wqkv = t.add(pre + "attn.wq", {l.qw, l.d}, ParamKind::Matrix, true);
  t.add(pre + "attn.wk", {l.kvw, l.d}, ParamKind::Matrix, true);
  t.add(pre + "attn.wv", {l.kvw, l.d}, ParamKind::Matrix, true);
  t.pad();
  if (c.qk_norm && c.norm_gain) {
    lo.qn_g = t.add(pre + "attn.q_norm.gain", {l.hd}, ParamKind::Scalar);
    lo.kn_g = t.add(pre + "attn.k_norm.gain", {l.hd}, ParamKind::Scalar);
  }
  lo.wo = t.add(pre + "attn.wo", {l.d, l.qw}, ParamKind::Matrix);
  if (c.norm_gain) lo.mlp_g = t.add(pre + "mlp_norm.gain", {l.d}, ParamKind::Scalar);
  lo.w_in = t.add(pre + "mlp.w_in", {l.Hd, l.d}, ParamKind::Matrix, true);
  if (c.activation == "swiglu") t.add(pre + "mlp.w_gate", {l.Hd, l.d}, ParamKind::Matrix, true);
  t.pad();
  lo.w_out = t.add(pre + "mlp.w_out", {l.d, l.Hd}, ParamKind::Matrix);
}

// Embeddings, the blocks (value embeddings of the last blocks first), the final norm, the head,
// then the multi-token projection and the smear weights (so the other tensors initialise as
// without them).
void plan_params(ModelLayout& l) {
  const ModelConfig& c = l.cfg;
  ParamTable t{l};
  l.wte = t.add("wte", {l.Vp, l.d}, ParamKind::Embedding);
  if (c.bigram_buckets > 0) l.bigram = t.add("bigram_embed", {c.bigram_buckets, l.d}, ParamKind::Embedding);
  l.layers.assign(size_t(l.L), LayerOff{});
  for (int i = std::max(l.L - c.value_embeds, 0); i < l.L; ++i)
    l.layers[size_t(i)].ve = t.add(fmt::format("blocks.{}.attn.value_embed", i), {l.Vp, l.kvw}, ParamKind::Embedding);
  for (int i = 0; i < l.L; ++i) add_block(l, t, i);
  if (c.norm_gain) l.final_gain = t.add("final_norm.gain", {l.d}, ParamKind::Scalar);
  l.head = c.tie_embeddings ? l.wte : t.add("lm_head", {l.Vp, l.d}, ParamKind::Head);
  if (c.mtp_weight > 0) l.mtp = t.add("mtp_proj", {l.d, l.d}, ParamKind::Matrix);
  if (c.smear) l.smear = t.add("smear", {1 + c.smear_gate_width()}, ParamKind::Scalar);
  for (auto& p : l.params) {
    int64_t& group = p.kind == ParamKind::Embedding ? l.counts.embed
                     : p.kind == ParamKind::Head    ? l.counts.head
                     : p.kind == ParamKind::Matrix  ? l.counts.matrix
                                                    : l.counts.scalar;
    group += p.numel();
  }
}

// Appends aligned views to an arena of `floats` floats, naming them in `views` when given.
struct Arena {
  int64_t& floats;
  std::vector<ActivationPlan::View>* views = nullptr;
  void carve(int64_t& dst, const std::string& name, int64_t n) {
    dst = floats;
    if (views) views->push_back({name, floats, align16(n)});
    floats += align16(n);
  }
};

// One block's activations for N rows. For a training block (`for_backward`) also what only its
// backward reads: the attention log-sum-exp and, before an embedding skip, the previous block's
// unmixed output.
void plan_block_acts(const ModelLayout& l, Arena& ar, BlockActs& b, int i, int64_t N, bool for_backward) {
  const std::string pre = fmt::format("blocks.{}.", i);
  auto carve = [&](int64_t& dst, const char* name, int64_t n) { ar.carve(dst, pre + name, n); };
  carve(b.x, "x", N * l.d);
  carve(b.mid, "mid", N * l.d);
  carve(b.ln1_rstd, "ln1_rstd", N);
  carve(b.ln1_mm, "ln1_mm", N * l.d);
  if (l.cfg.qk_norm) {
    carve(b.qraw, "qraw", N * l.qw);
    carve(b.kraw, "kraw", N * l.kvw);
    carve(b.q_rstd, "q_rstd", N * l.H);
    carve(b.k_rstd, "k_rstd", N * l.Hkv);
  }
  carve(b.q, "q", N * l.qw);
  carve(b.k, "k", N * l.kvw);
  carve(b.v, "v", N * l.kvw);
  carve(b.o, "o", N * l.qw);
  if (for_backward) carve(b.lse, "lse", N * l.H);
  carve(b.att_mm, "att_mm", N * l.qw);
  carve(b.ln2_rstd, "ln2_rstd", N);
  carve(b.ln2_mm, "ln2_mm", N * l.d);
  carve(b.h, "h", N * l.hw);
  carve(b.act_mm, "act_mm", N * l.Hd);
  if (for_backward && l.layers[size_t(i)].x0 >= 0) carve(b.xpre, "xpre", N * l.d);
}

// Scratch shared by all blocks, sized for the widest row any of them writes.
void plan_shared_acts(const ModelLayout& l, ActivationPlan& a, Arena& ar, int64_t N) {
  const int64_t d = l.d, wmax = std::max<int64_t>({l.d, l.qkvw, l.hw, l.Hd});
  if (l.cfg.x0_skips) ar.carve(a.dx0, "dx0", N * d);
  ar.carve(a.x_final, "x_final", N * d);
  ar.carve(a.lnf_rstd, "lnf_rstd", N);
  ar.carve(a.lnf_mm, "lnf_mm", N * d);
  ar.carve(a.dxf, "dxf", N * d);
  ar.carve(a.head_dw, "head_dw", int64_t(l.Vp) * d);
  ar.carve(a.logits, "logits", a.chunk_rows * a.logits_ld);
  ar.carve(a.logits_mm, "logits_mm", a.chunk_rows * a.logits_ld);
  ar.carve(a.tmp_d, "tmp_d", N * wmax);
  ar.carve(a.tmp_mm, "tmp_mm", N * wmax);
  ar.carve(a.qkv, "qkv", N * l.qkvw);
  ar.carve(a.dres, "dres", N * d);
  ar.carve(a.dtmp, "dtmp", N * wmax);
  ar.carve(a.dtmp2, "dtmp2", N * wmax);
  ar.carve(a.dmm, "dmm", N * wmax);
  ar.carve(a.dq, "dq", N * l.qw);
  ar.carve(a.dk, "dk", N * l.kvw);
  ar.carve(a.dv, "dv", N * l.kvw);
  ar.carve(a.cos_t, "cos_t", int64_t(l.max_T) * l.hd / 2);
  ar.carve(a.sin_t, "sin_t", int64_t(l.max_T) * l.hd / 2);
  if (l.mtp >= 0) {
    ar.carve(a.mtp_u, "mtp_u", N * d);
    ar.carve(a.mtp_un, "mtp_un", N * d);
    ar.carve(a.mtp_rstd, "mtp_rstd", N);
    ar.carve(a.mtp_dw, "mtp_dw", d * d);
  }
}

void plan_acts(ModelLayout& l) {
  ActivationPlan& a = l.act;
  const int64_t N = int64_t(l.max_B) * l.max_T;
  a.rows = N;
  const int64_t per_chunk = l.Vp > 0 ? (int64_t(1) << 25) / l.Vp : N;  // <= 128 MiB of logits
  a.chunk_rows = std::max<int64_t>(1, std::min<int64_t>(N, per_chunk));
  a.logits_ld = logits_row_stride(l.Vp);
  Arena ar{a.floats, &a.views};
  a.blocks.assign(size_t(l.L), BlockActs{});
  for (int i = 0; i < l.L; ++i) plan_block_acts(l, ar, a.blocks[size_t(i)], i, N, true);
  plan_shared_acts(l, a, ar, N);
  // tokens, targets, argmax, loss, bigram rows (+ token after next) (+ previous tokens)
  a.io_arrays = 5 + (l.mtp >= 0 ? 1 : 0) + (l.smear >= 0 ? 1 : 0);
  a.io_stride = align16(N);
}

}  // namespace

InferencePlan inference_plan(const ModelLayout& l, int64_t N, int T, int64_t head_rows) {
  InferencePlan p;
  p.rows = N;
  p.T = T;
  p.head_rows = head_rows;
  Arena ar{p.floats};
  plan_block_acts(l, ar, p.block, 0, N, false);
  const int64_t wmax = std::max<int64_t>({l.d, l.qkvw, l.hw, l.Hd, l.qw});
  ar.carve(p.qkv, "", N * l.qkvw);
  ar.carve(p.tmp_d, "", N * wmax);
  ar.carve(p.lnf_rstd, "", N);
  ar.carve(p.logits, "", head_rows * l.Vp);
  ar.carve(p.rows_mm, "", head_rows * l.d);
  ar.carve(p.cos_t, "", int64_t(T) * l.hd / 2);
  ar.carve(p.sin_t, "", int64_t(T) * l.hd / 2);
  ar.carve(p.loss, "", N);
  if (l.cfg.x0_skips) ar.carve(p.x0, "", N * l.d);
  for (int64_t* io : {&p.tok, &p.tgt, &p.argmax, &p.bigram, &p.prev}) ar.carve(*io, "", N);  // int32 arrays
  return p;
}

double ModelLayout::flops_per_token(int T) const {
  const bool mtp_head = mtp >= 0;
  // One token's forward matmuls: 2 FLOPs per weight (mtp_proj among the matrices), the head once
  // more with the multi-token head; attention q.k and p.v over the keys the token sees.
  double mm = double(counts.matrix) + double(Vp) * d * (mtp_head ? 2 : 1);
  double att = double(L) * 4.0 * H * hd * mean_attended_keys(T, cfg.attn_window);
  return 3.0 * (2.0 * mm + att);  // backward = 2x forward
}

ModelLayout model_layout(const ModelConfig& cfg, int max_B, int max_T) {
  ModelLayout l;
  l.cfg = cfg;
  set_dims(l);
  plan_params(l);
  l.bytes = size_t(l.param_floats) * (4 + 4 + 2);
  if (max_B <= 0 || max_T <= 0) return l;
  l.max_B = max_B;
  l.max_T = max_T;
  plan_acts(l);
  l.bytes += size_t(l.act.floats) * 4 + size_t(l.act.io_stride) * 4 * size_t(l.act.io_arrays);
  return l;
}

}  // namespace clm
