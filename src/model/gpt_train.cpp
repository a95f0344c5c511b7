// The GPT's training forward and backward (docs/MODEL.md): the blocks as forward/backward pairs
// of backend ops (block_fwd, block_bwd), the embedding and final norm around them, the multi-token
// head, and the one LM head pass that every head (training, evaluation, sampling and the cached
// inference of gpt_infer.cpp) goes through. Each step opens a ProfRegion naming what its ops are
// for; timing and counting the ops is the profiler's business, not the model's.
#include <algorithm>
#include <cmath>

#include "model/gpt_impl.h"

namespace clm {

// ---- blocks --------------------------------------------------------------------------------------
void GPTImpl::attn_in(const LayerOff& lo, LayerAct& a, float* qkv_buf, int64_t N) {
  {
    ProfRegion pr(prof, "rmsnorm.attn", "fwd");
    norm_to_mm(a.x, lo.attn_g, a.ln1_mm, a.ln1_rstd, N);
  }
  ProfRegion pr(prof, "matmul.qkv", "fwd");
  be->linear_fwd(prec, a.ln1_mm, w(lo.wqkv), qkv_buf, N, d, qkvw);
}

void GPTImpl::attn_out_mlp(const LayerOff& lo, LayerAct& a, float* xout, float* tmp, int64_t N) {
  {
    ProfRegion pr(prof, "matmul.wo", "fwd");
    be->linear_fwd(prec, a.att_mm, w(lo.wo), tmp, N, qw, d);
  }
  {
    ProfRegion pr(prof, "residual.rmsnorm.mlp", "fwd");  // mid = x + attention's output, then its norm
    norm_to_mm(a.x, lo.mlp_g, a.ln2_mm, a.ln2_rstd, N, tmp, a.mid);
  }
  {
    ProfRegion pr(prof, "matmul.mlp_in", "fwd");
    be->linear_fwd(prec, a.ln2_mm, w(lo.w_in), a.h, N, d, hw);
  }
  {
    ProfRegion pr(prof, "activation", "fwd");
    be->activation_fwd(act, a.h, a.act_mm, mmt(), N, Hd);
  }
  {
    ProfRegion pr(prof, "matmul.mlp_out", "fwd");
    be->linear_fwd(prec, a.act_mm, w(lo.w_out), tmp, N, Hd, d);
  }
  ProfRegion pr(prof, "residual", "fwd");
  be->residual_fwd(a.mid, tmp, xout, N * d);
}

void GPTImpl::block_fwd(int l) {
  LayerAct& a = block_acts[l];
  const LayerOff& lo = block_offs[l];
  const int64_t N = int64_t(B) * T;
  if (lo.x0 >= 0) {  // x = a xpre + b x0
    ProfRegion pr(prof, "x0_skip", "fwd");
    be->mix2_fwd(a.xpre, block_acts[0].x, pp(lo.x0), a.x, N * d);
  }
  attn_in(lo, a, qkv, N);
  {
    ProfRegion pr(prof, "qk_norm.rope", "fwd");  // and the value embedding's rows added to v
    be->qkv_heads_fwd({.shape = {.B = B, .H = H, .Hkv = Hkv, .hd = hd}, .T = T,
                       .norm = {.on = cfg.qk_norm, .qg = pp(lo.qn_g), .kg = pp(lo.kn_g), .eps = cfg.norm_eps},
                       .rope = {.cos_t = cos_t, .sin_t = sin_t}, .qkv = qkv, .ve = pp(lo.ve), .tok = tok_d,
                       .qraw = a.qraw, .kraw = a.kraw, .q_rstd = a.q_rstd, .k_rstd = a.k_rstd, .q = a.q, .k = a.k,
                       .v = a.v});
  }
  {
    ProfRegion pr(prof, "attention", "fwd");
    be->attention_fwd({.shape = {.B = B, .H = H, .Hkv = Hkv, .hd = hd}, .Tq = T, .Tk = T, .Tk_cap = T,
                       .window = cfg.attn_window, .prec = prec, .q = a.q, .k = a.k, .v = a.v, .o = a.o,
                       .lse = a.lse});
  }
  {
    ProfRegion pr(prof, "merge_heads", "fwd");
    be->merge_heads({.B = B, .T = T, .nh = H, .hd = hd, .ld = qw, .y = a.o, .x = a.att_mm, .out_t = mmt()});
  }
  // The output goes where the next block reads its input: before its skip mix, when it has one.
  float* xout = l + 1 == L                 ? x_final
               : block_offs[l + 1].x0 >= 0 ? block_acts[l + 1].xpre
                                           : block_acts[l + 1].x;
  attn_out_mlp(lo, a, xout, tmp_d, N);
}

void GPTImpl::matmul_bwd(const char* dw_name, const char* dx_name, const void* dy, const void* x_mm,
                         int64_t w_off, int in, int out, int64_t N) {
  {
    ProfRegion pr(prof, dw_name, "bwd");
    be->linear_bwd_weight(prec, dy, x_mm, grads_buf.as<float>() + w_off, N, in, out);
  }
  ProfRegion pr(prof, dx_name, "bwd");
  be->linear_bwd_input(prec, dy, w(w_off), dtmp, N, in, out, false);
}

void GPTImpl::block_bwd(int l) {
  LayerAct& a = block_acts[l];
  const LayerOff& lo = block_offs[l];
  const int64_t N = int64_t(B) * T;
  float* g = grads_buf.as<float>();
  // ---- MLP branch: xout = mid + W_out act(W_in norm(mid)) ----
  matmul_bwd("matmul.mlp_out.dw", "matmul.mlp_out.dx", mm_input(dres, dmm, N * d), a.act_mm, lo.w_out, Hd, d, N);
  {
    ProfRegion pr(prof, "activation", "bwd");
    be->activation_bwd(act, a.h, dtmp, dmm, mmt(), N, Hd);
  }
  matmul_bwd("matmul.mlp_in.dw", "matmul.mlp_in.dx", dmm, a.ln2_mm, lo.w_in, d, hw, N);
  {
    ProfRegion pr(prof, "rmsnorm.mlp", "bwd");
    be->rmsnorm_bwd({.rows = N, .C = d, .x = a.mid, .g = pp(lo.mlp_g), .rstd = a.ln2_rstd, .dy = dtmp,
                     .dx = dres, .dg = gp(lo.mlp_g)});
  }
  // ---- attention branch: mid = x + W_o attn(rope(qknorm(W_qkv norm(x)))) ----
  matmul_bwd("matmul.wo.dw", "matmul.wo.dx", mm_input(dres, dmm, N * d), a.att_mm, lo.wo, qw, d, N);
  {
    ProfRegion pr(prof, "attention", "bwd");
    // dO in [B,H,T,hd]
    be->split_heads({.B = B, .T = T, .nh = H, .hd = hd, .ld = qw, .x = dtmp, .y = dtmp2});
    be->attention_bwd({.shape = {.B = B, .H = H, .Hkv = Hkv, .hd = hd}, .T = T, .window = cfg.attn_window,
                       .prec = prec, .q = a.q, .k = a.k, .v = a.v, .o = a.o, .lse = a.lse, .dout = dtmp2, .dq = dq, .dk = dk,
                       .dv = dv});
  }
  if (lo.ve >= 0) {  // v = W_v x + ve[tok]: the table's rows get dv, back in token-row layout
    ProfRegion pr(prof, "value_embed", "bwd");
    be->merge_heads(
        {.B = B, .T = T, .nh = Hkv, .hd = hd, .ld = kvw, .y = dv, .x = dtmp2, .out_t = DType::F32});
    be->embedding_bwd(tok_d, dtmp2, g + lo.ve, N, kvw);
  }
  {
    ProfRegion pr(prof, "qk_norm.rope", "bwd");
    be->qkv_heads_bwd({.shape = {.B = B, .H = H, .Hkv = Hkv, .hd = hd}, .T = T,
                       .norm = {.on = cfg.qk_norm, .qg = pp(lo.qn_g), .kg = pp(lo.kn_g)},
                       .rope = {.cos_t = cos_t, .sin_t = sin_t}, .dq = dq, .dk = dk, .dv = dv, .qraw = a.qraw,
                       .kraw = a.kraw, .q_rstd = a.q_rstd, .k_rstd = a.k_rstd, .dqg = gp(lo.qn_g),
                       .dkg = gp(lo.kn_g), .dqkv = dmm, .dqkv_t = mmt()});
  }
  matmul_bwd("matmul.qkv.dw", "matmul.qkv.dx", dmm, a.ln1_mm, lo.wqkv, d, qkvw, N);
  {
    ProfRegion pr(prof, "rmsnorm.attn", "bwd");
    be->rmsnorm_bwd({.rows = N, .C = d, .x = a.x, .g = pp(lo.attn_g), .rstd = a.ln1_rstd, .dy = dtmp,
                     .dx = dres, .dg = gp(lo.attn_g)});
  }
  if (lo.x0 >= 0) {  // x = a xpre + b x0: dres becomes the previous block's output gradient
    ProfRegion pr(prof, "x0_skip", "bwd");
    be->mix2_bwd({.n = N * d, .dout = dres, .x = a.xpre, .x0 = block_acts[0].x, .w = pp(lo.x0), .dx = dres,
                  .dx0 = dx0, .dw = g + lo.x0});
  }
}

void GPTImpl::stage_inputs(int64_t a, const int32_t* in, int B_, int T_) {
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
  const Slot s = slot(a);
  be->to_device(s.tok, in, sizeof(int32_t) * N);
  if (off_big >= 0) {  // each training row starts without a previous token
    std::vector<int32_t> rows(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) rows[size_t(i)] = bigram_row(i % T == 0 ? -1 : in[i - 1], in[i], cfg.bigram_buckets);
    be->to_device(s.big, rows.data(), sizeof(int32_t) * N);
  }
  if (off_smear >= 0) {  // the same rule for token smearing
    std::vector<int32_t> prev(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) prev[size_t(i)] = i % T == 0 ? -1 : in[i - 1];
    be->to_device(s.prev, prev.data(), sizeof(int32_t) * N);
  }
}

void GPTImpl::body_ops() {
  const int64_t N = int64_t(B) * T;
  refresh_bf16();
  embed_fwd(tok_d, prev_d, N, block_acts[0].x);
  if (off_big >= 0) add_bigram_rows(big_d, N, block_acts[0].x, tmp_d);
  for (int l = 0; l < L; ++l) block_fwd(l);
  ProfRegion pr(prof, "rmsnorm.final", "fwd");
  norm_to_mm(x_final, off_fg, lnf_mm, lnf_rstd, N);
}

// ---- the LM head -----------------------------------------------------------------------------------
void GPTImpl::head_pass(const HeadPass& p, int64_t n, const std::function<HeadChunk(int64_t, int64_t)>& rows,
                        const std::function<void(int64_t, int64_t)>& done) {
  const int64_t ld = p.ld > 0 ? p.ld : Vp;
  for (int64_t r0 = 0; r0 < n; r0 += p.chunk_rows) {
    const int64_t nr = std::min<int64_t>(p.chunk_rows, n - r0);
    const HeadChunk c = rows(r0, nr);
    {
      ProfRegion pr(prof, p.names.fwd, "fwd");
      be->linear_fwd(prec, c.x, w(off_head), p.logits, nr, d, Vp, ld);
    }
    if (p.mode == HeadMode::Logits) {
      be->softcap_fwd(p.logits, (nr - 1) * ld + Vp, cfg.logit_softcap);  // the padding columns too: unread
      float* out = p.out + r0 * Vp;
      if (ld == Vp)
        be->to_host(out, p.logits, sizeof(float) * nr * Vp);
      else
        for (int64_t r = 0; r < nr; ++r) be->to_host(out + r * Vp, p.logits + r * ld, sizeof(float) * Vp);
      for (int64_t r = 0; r < nr; ++r)  // the padding columns are no tokens
        for (int j = V; j < Vp; ++j) out[r * Vp + j] = -INFINITY;
    } else {
      const bool grad = p.mode == HeadMode::Train;
      // In bf16 the loss writes the gradient's bf16 copy itself, the matmuls' input.
      bf16* dlogits_bf16 = grad && prec == MatPrec::BF16 ? reinterpret_cast<bf16*>(logits_mm) : nullptr;
      {
        ProfRegion pr(prof, p.names.xent, "fwd");
        be->softcap_xent({.N = nr, .V = V, .Vp = Vp, .cap = cfg.logit_softcap, .logits = p.logits,
                          .targets = c.tgt, .loss = c.loss, .loss_sum = p.loss_sum, .argmax = c.amax,
                          .want_grad = grad, .grad_scale = p.gscale, .grad_bf16 = dlogits_bf16, .ld = ld});
      }
      if (grad) {
        const void* dlogits = dlogits_bf16 ? static_cast<const void*>(dlogits_bf16) : p.logits;
        {
          ProfRegion pr(prof, p.names.dx, "bwd");
          be->linear_bwd_input(prec, dlogits, w(off_head), c.dx, nr, d, Vp, false, ld);
        }
        ProfRegion pr(prof, p.names.dw, "bwd");
        be->linear_bwd_weight(prec, dlogits, c.x, head_dw, nr, d, Vp, ld);
      }
    }
    if (done) done(r0, nr);
  }
}

void GPTImpl::head_chunks(const HeadNames& names, const float* x_mm, const int32_t* tgt, int64_t N, float* loss,
                          int32_t* amax, bool grad, float gscale, float* dx, double* loss_sum) {
  const int mmb = prec == MatPrec::BF16 ? 2 : 4;
  const HeadPass p{grad ? HeadMode::Train : HeadMode::Score, names, chunk_rows, logits, gscale, nullptr, loss_sum,
                   logits_ld};
  head_pass(p, N, [&](int64_t r0, int64_t) {
    return HeadChunk{x_mm + r0 * d * mmb / 4, tgt ? tgt + r0 : nullptr, loss ? loss + r0 : nullptr,
                     amax ? amax + r0 : nullptr, dx + r0 * d};
  });
}

GPT::LossCounts GPTImpl::stage_targets(int64_t a, const int32_t* targets) {
  const int64_t N = int64_t(B) * T;
  GPT::LossCounts c;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] >= V) fail("GPT forward: target id {} out of range [0, {})", targets[i], V);
    c.valid += targets[i] >= 0;
  }
  const Slot s = slot(a);
  be->to_device(s.tgt, targets, sizeof(int32_t) * N);
  if (off_mtp >= 0 && grad_enabled) {  // the head runs only with gradients (queue_staged)
    // Position t of a row predicts the target of position t + 1 (the token after next); the last
    // position of each row has none.
    std::vector<int32_t> tgt2(size_t(N), -1);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t + 1 < T; ++t) {
        const int64_t i = int64_t(b) * T + t;
        tgt2[size_t(i)] = targets[i + 1];
        c.mtp_valid += targets[i + 1] >= 0;
      }
    be->to_device(s.tgt2, tgt2.data(), sizeof(int32_t) * N);
  }
  return c;
}

void GPTImpl::mtp_fwd(int64_t valid, double* sum_d) {
  const int64_t N = int64_t(B) * T;
  const float gscale = valid > 0 ? cfg.mtp_weight / float(valid) : 0.0f;
  {
    ProfRegion pr(prof, "matmul.mtp_proj", "fwd");
    be->linear_fwd(prec, lnf_mm, w(off_mtp), mtp_u, N, d, d);
  }
  {
    ProfRegion pr(prof, "rmsnorm.mtp", "fwd");
    norm_to_mm(mtp_u, -1, mtp_un, mtp_rstd, N);
  }
  // The head, as for the next-token loss; the gradient of its normed input goes into dtmp.
  float* dun = dtmp;
  head_chunks({"matmul.mtp_head", "softcap_xent.mtp", "matmul.mtp_head.dx", "matmul.mtp_head.dw"}, mtp_un,
              tgt2_d, N, nullptr, nullptr, true, gscale, dun, sum_d);
  {
    ProfRegion pr(prof, "rmsnorm.mtp", "bwd");
    be->zero(dtmp2, sizeof(float) * N * d);
    be->rmsnorm_bwd({.rows = N, .C = d, .x = mtp_u, .rstd = mtp_rstd, .dy = dun, .dx = dtmp2});
  }
  const void* du = mm_input(dtmp2, dmm, N * d);
  {
    ProfRegion pr(prof, "matmul.mtp_proj.dw", "bwd");
    be->zero(mtp_dw, sizeof(float) * int64_t(d) * d);
    be->linear_bwd_weight(prec, du, lnf_mm, mtp_dw, N, d, d);
  }
  {
    ProfRegion pr(prof, "matmul.mtp_proj.dx", "bwd");
    be->linear_bwd_input(prec, du, w(off_mtp), dxf, N, d, d, true);  // onto the next-token head's
  }
}

// ---- the model's training entry points -------------------------------------------------------------
GPT::LossCounts GPTImpl::queue_forward(const int32_t* inputs, const int32_t* targets, int B_, int T_,
                                       bool rows_loss, bool rows_argmax, double* sums_d) {
  stage_inputs(0, inputs, B_, T_);
  const GPT::LossCounts c = targets ? stage_targets(0, targets) : GPT::LossCounts{};
  queue_staged(0, targets != nullptr, c, rows_loss, rows_argmax, sums_d);
  return c;
}

void GPTImpl::queue_staged(int64_t a, bool targets, const GPT::LossCounts& c, bool rows_loss, bool rows_argmax,
                           double* sums_d) {
  have_fwd = false;
  use_slot(a);
  body_ops();
  const int64_t N = int64_t(B) * T;
  const bool grad = grad_enabled && targets;
  const float gscale = c.valid > 0 ? 1.0f / float(c.valid) : 0.0f;
  if (grad) be->zero(head_dw, sizeof(float) * int64_t(Vp) * d);
  be->zero(sums_d, 2 * sizeof(double));
  head_chunks({"matmul.head", "softcap_xent", "matmul.head.dx", "matmul.head.dw"}, lnf_mm, targets ? tgt_d : nullptr,
              N, rows_loss ? loss_d : nullptr, rows_argmax ? argmax_d : nullptr, grad, gscale, dxf, sums_d);
  if (grad && off_mtp >= 0) mtp_fwd(c.mtp_valid, sums_d + 1);
  have_fwd = true;
  fwd_had_grad = grad;
}

GPT::LossCounts GPT::forward_deferred(const int32_t* inputs, const int32_t* targets, int B, int T, double* sums_d) {
  if (!targets) fail("GPT forward_deferred: no targets");
  return impl->queue_forward(inputs, targets, B, T, false, false, sums_d);
}

GPT::LossCounts GPT::stage_batch(int64_t slot, const int32_t* inputs, const int32_t* targets, int B, int T) {
  GPTImpl& m = *impl;
  if (!targets) fail("GPT stage_batch: no targets");
  if (slot < 0) fail("GPT stage_batch: slot {}", slot);
  if (slot > 0 && (B != m.B || T != m.T))
    fail("GPT stage_batch: slot {} is {}x{}, slot 0 {}x{} (a step's micro-batches share one shape)", slot, B, T,
         m.B, m.T);
  m.stage_inputs(slot, inputs, B, T);
  return m.stage_targets(slot, targets);
}

void GPT::forward_staged(int64_t slot, const LossCounts& c, double* sums_d) {
  impl->queue_staged(slot, true, c, false, false, sums_d);
}

std::pair<float, float> GPT::loss_means(const double* sums, const LossCounts& c) {
  return {c.valid > 0 ? float(sums[0] / double(c.valid)) : 0.0f,
          float(c.mtp_valid > 0 ? sums[1] / double(c.mtp_valid) : 0.0)};
}

float GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T, float* token_loss,
                   int32_t* argmax) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  double* sums_d = step_scalars(2);
  const LossCounts c = m.queue_forward(inputs, targets, B, T, token_loss != nullptr, argmax != nullptr, sums_d);
  const int64_t N = int64_t(B) * T;
  if (token_loss) {
    if (targets) be.to_host(token_loss, m.loss_d, sizeof(float) * N);
    else std::fill(token_loss, token_loss + N, 0.0f);
  }
  if (argmax) be.to_host(argmax, m.argmax_d, sizeof(int32_t) * N);
  double sums[2];
  be.to_host(sums, sums_d, sizeof(sums));
  const auto [mean, mtp] = loss_means(sums, c);
  m.last_mtp = mtp;
  if (!std::isfinite(mean) || !std::isfinite(mtp)) m.have_fwd = false;
  if (!std::isfinite(mean)) throw NonFiniteError(fmt::format("GPT forward: loss is not finite ({})", mean));
  if (!std::isfinite(mtp))
    throw NonFiniteError(fmt::format("GPT forward: multi-token loss is not finite ({})", mtp));
  return mean;
}

std::vector<std::pair<std::string, double>> GPT::aux_losses() const {
  if (!(impl->cfg.mtp_weight > 0)) return {};
  return {{"mtp_loss", double(impl->last_mtp)}};
}

void GPT::backward(float loss_scale) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  if (!m.have_fwd || !m.fwd_had_grad)
    fail("GPT backward: no forward with targets and gradients enabled precedes it");
  m.have_fwd = false;
  const int d = m.d;
  const int64_t N = int64_t(m.B) * m.T;
  float* grads = m.grads_buf.as<float>();
  {
    ProfRegion pr(m.prof, "head.grad_accum", "bwd");
    be.axpy(grads + m.off_head, loss_scale, m.head_dw, int64_t(m.Vp) * d);
    if (m.off_mtp >= 0) be.axpy(grads + m.off_mtp, loss_scale, m.mtp_dw, int64_t(d) * d);
  }
  {
    ProfRegion pr(m.prof, "rmsnorm.final", "bwd");
    be.scale(m.dxf, loss_scale, N * d);
    be.zero(m.dres, sizeof(float) * N * d);
    be.rmsnorm_bwd({.rows = N, .C = d, .x = m.x_final, .g = m.pp(m.off_fg), .rstd = m.lnf_rstd, .dy = m.dxf,
                    .dx = m.dres, .dg = m.gp(m.off_fg)});
  }
  if (m.dx0) be.zero(m.dx0, sizeof(float) * N * d);
  for (int l = m.L - 1; l >= 0; --l) m.block_bwd(l);
  if (m.dx0) be.axpy(m.dres, 1.0f, m.dx0, N * d);  // the embedding output's gradient through the skips
  {
    ProfRegion pr(m.prof, "embedding", "bwd");
    m.embed_bwd(m.tok_d, m.prev_d, N, m.dres);
    if (m.off_big >= 0) be.embedding_bwd(m.big_d, m.dres, grads + m.off_big, N, d);  // rows of the forward
  }
  m.bf16_dirty = true;  // an optimizer step normally follows
}

void GPT::last_logits(const int32_t* inputs, int B, int T, float* out) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  m.have_fwd = false;
  m.body_fwd(inputs, B, T);
  const int d = m.d;
  const int mmb = m.prec == MatPrec::BF16 ? 2 : 4;
  // gather the last row of each sequence (matmul-precision rows are d*mmb bytes)
  char* rows = reinterpret_cast<char*>(m.tmp_mm);
  const char* src = reinterpret_cast<const char*>(m.lnf_mm);
  for (int b = 0; b < B; ++b)
    be.copy(rows + int64_t(b) * d * mmb, src + (int64_t(b) * T + T - 1) * d * mmb, size_t(d) * mmb);
  const GPTImpl::HeadPass p{GPTImpl::HeadMode::Logits, {"matmul.head", nullptr, nullptr, nullptr}, m.chunk_rows,
                            m.logits, 0.0f, out, nullptr, m.logits_ld};
  m.head_pass(p, B, [&](int64_t b0, int64_t) { return GPTImpl::HeadChunk{rows + b0 * d * mmb}; });
}

}  // namespace clm
