// The GPT's private state, shared by the files that make up the model (gpt.cpp: layout and
// parameters; gpt_train.cpp: the training forward and backward and the LM head; gpt_infer.cpp: the
// cached forward of inference): parameter offsets, activation pointers and the helpers they share.
// Only the model's own .cpp files include it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/profiled_backend.h"
#include "core/common.h"
#include "core/profiler.h"
#include "model/gpt.h"

namespace clm {


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
inline int32_t bigram_row(int32_t prev, int32_t cur, int K) {
  if (prev < 0) return K - 1;
  uint64_t x = (uint64_t(uint32_t(prev)) << 32) | uint32_t(cur);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return int32_t(x % uint64_t(K - 1));
}

struct GPTImpl {
  // While a profiler is attached, be points at this decorator over `device` (set_profiler); it is
  // kept for the model's lifetime, before every buffer, since buffers may be allocated through it.
  std::unique_ptr<ProfiledBackend> profiled;
  Backend* device = nullptr;
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
  DeviceBuffer params_buf, grads_buf, bf16_buf;  // params, grads (fp32) and the bf16 mirror of the params
  DeviceBuffer G_acc;     // train_step's sum of micro-batch gradients (allocated at first use)
  DeviceBuffer scalars;   // step_scalars(): loss sums and the like, grown on demand
  std::vector<LayerOff> block_offs;  // the layout's parameter offsets, by the names the passes use
  int64_t off_wte = 0, off_fg = -1, off_head = 0;
  int64_t off_big = -1;  // the bigram table [bigram_buckets, d], when model.bigram_buckets > 0
  int64_t off_mtp = -1;  // mtp_proj [d, d], when model.mtp_weight > 0
  int64_t off_smear = -1;  // the smear weights [1 + k], when model.smear

  DeviceBuffer arena;  // activation arena
  DeviceBuffer io;  // tokens, targets, per-token loss and argmax of one forward ([N] each)
  // The token arrays a forward reads: those of the micro-batch slot last selected (use_slot).
  int32_t *tok_d = nullptr, *tgt_d = nullptr, *argmax_d = nullptr, *big_d = nullptr;
  int32_t* tgt2_d = nullptr;  // the multi-token head's targets (the token after next)
  int32_t* prev_d = nullptr;  // token smearing: each position's previous token in its row (-1: none)
  float* loss_d = nullptr;
  // Micro-batch slots past the first (slot 0 is io's arrays): tokens, targets, bigram rows, the
  // token after next and the previous tokens, io_stride ints each, so a whole step's batches are
  // on the device before its ops are queued (GPT::stage_batch).
  DeviceBuffer slots_buf;
  int64_t n_slots = 1;
  int32_t *tok_d0 = nullptr, *tgt_d0 = nullptr, *big_d0 = nullptr, *tgt2_d0 = nullptr,
          *prev_d0 = nullptr;  // slot 0
  // Advances whenever a buffer a training step's ops use is allocated anew (GPT::memory_epoch).
  uint64_t memory_epoch = 0;
  struct Slot {
    int32_t *tok, *tgt, *big, *tgt2, *prev;
  };
  static constexpr int64_t kSlotArrays = 5;
  Slot slot(int64_t a);  // grows the slots to hold `a`
  void use_slot(int64_t a);  // tok_d, tgt_d, big_d, tgt2_d and prev_d := slot a's
  std::vector<LayerAct> block_acts;
  float *x_final, *lnf_rstd, *lnf_mm, *dxf, *head_dw, *logits, *logits_mm;
  float *tmp_d, *tmp_mm, *qkv, *dres, *dtmp, *dtmp2, *dmm, *dq, *dk, *dv, *cos_t, *sin_t;
  float* dx0 = nullptr;  // backward: the gradient reaching the embedding output through the skips
  // Multi-token head: u = mtp_proj lnf [N,d] (fp32), its RMSNorm in matmul precision and rstd,
  // and the gradient of mtp_proj computed in forward (added, scaled, in backward).
  float *mtp_u = nullptr, *mtp_un = nullptr, *mtp_rstd = nullptr, *mtp_dw = nullptr;
  float last_mtp = 0;  // the multi-token head's loss in the last forward (aux_losses)
  int64_t chunk_rows = 0;
  int64_t logits_ld = 0;  // the training logits' row stride (ModelLayout)

  // state of the last forward (B and T: of the last staged batch)
  int B = 0, T = 0;
  bool have_fwd = false, fwd_had_grad = false;

  const void* w(int64_t off) const {  // weight in matmul precision
    if (prec == MatPrec::F32) return params_buf.as<float>() + off;
    return bf16_buf.as<bf16>() + off;
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
      ProfRegion pr(prof, "weights.to_bf16", "fwd");
      be->f32_to_bf16(params_buf.as<float>(), bf16_buf.as<bf16>(), nparams);
    }
    bf16_dirty = false;
  }

  // RMSNorm of rows of width d straight into a matmul-input buffer; with `residual`, of the rows
  // x + residual, which are written to `sum` (the residual add fused into the norm's pass).
  void norm_to_mm(const float* x, int64_t goff, float* dst, float* rstd, int64_t N, const float* residual = nullptr,
                  float* sum = nullptr) {
    const float* g = goff >= 0 ? params_buf.as<float>() + goff : nullptr;
    be->rmsnorm_fwd({.rows = N, .C = d, .eps = cfg.norm_eps, .x = x, .g = g, .residual = residual, .sum = sum,
                     .y = dst, .out_t = mmt(), .rstd = rstd});
  }
  const float* pp(int64_t off) const { return off >= 0 ? params_buf.as<float>() + off : nullptr; }
  // x[N, d] += bigram_embed[row[n]] (rows computed on the host, copied to `row_d`), through `tmp`.
  void add_bigram(const std::vector<int32_t>& rows, int32_t* row_d, float* x, float* tmp) {
    be->to_device(row_d, rows.data(), sizeof(int32_t) * rows.size());
    add_bigram_rows(row_d, int64_t(rows.size()), x, tmp);
  }
  // The same from rows already on the device.
  void add_bigram_rows(const int32_t* row_d, int64_t N, float* x, float* tmp) {
    ProfRegion pr(prof, "embedding.bigram", "fwd");
    be->embedding_fwd(row_d, params_buf.as<float>() + off_big, tmp, N, d);
    be->axpy(x, 1.0f, tmp, N * d);
  }
  float* gp(int64_t off) const { return off >= 0 ? grads_buf.as<float>() + off : nullptr; }
  // The token embedding of N rows into x: a lookup, or with token smearing (model.smear) the
  // lookup mixed with each row's previous token's (prev: -1 where none); and its backward into the
  // table's (and the smear weights') gradients.
  void embed_fwd(const int32_t* tok, const int32_t* prev, int64_t N, float* x) {
    ProfRegion pr(prof, "embedding", "fwd");
    const float* wte = params_buf.as<float>() + off_wte;
    if (off_smear < 0) return be->embedding_fwd(tok, wte, x, N, d);
    be->embed_smear_fwd({.N = N, .C = d, .k = cfg.smear_gate_width(), .tok = tok, .prev = prev, .wte = wte,
                         .w = pp(off_smear), .out = x});
  }
  void embed_bwd(const int32_t* tok, const int32_t* prev, int64_t N, const float* dx) {
    float* dwte = grads_buf.as<float>() + off_wte;
    if (off_smear < 0) return be->embedding_bwd(tok, dx, dwte, N, d);
    be->embed_smear_bwd({.N = N, .C = d, .k = cfg.smear_gate_width(), .tok = tok, .prev = prev,
                         .wte = params_buf.as<float>() + off_wte, .w = pp(off_smear), .dout = dx, .dwte = dwte,
                         .dw = gp(off_smear)});
  }

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
    int32_t *tok = nullptr, *tgt = nullptr, *argmax = nullptr, *big = nullptr, *prev = nullptr;
  } inf;

  // Allocates params, grads, the bf16 mirror, the activation arena and io as `layout` says (after
  // refusing a layout larger than the device) and points every Param and view into them.
  void build();
  void bind_activations();
  // Points a block's activation pointers at `base` + the plan's offsets (null where absent).
  static LayerAct bind_block(const BlockActs& b, float* base);
  // ---- the blocks (gpt_train.cpp: training, gpt_infer.cpp: cached inference) ----
  // The halves every block shares: the attention RMSNorm of a.x and the fused q/k/v projection
  // into qkv_buf; and, once attention has written a.att_mm, the output projection, the residual
  // add and the MLP half, a.x -> xout (may be the same buffer), with `tmp` as scratch.
  void attn_in(const LayerOff& lo, LayerAct& a, float* qkv_buf, int64_t N);
  void attn_out_mlp(const LayerOff& lo, LayerAct& a, float* xout, float* tmp, int64_t N);
  // Training block l on the B x T rows of the last body_fwd: its input (mixed with the embedding
  // output first, when the block has x0 skip weights), attention over the block's own keys, and
  // its output into the next block's input (or x_final). Keeps what block_bwd reads.
  void block_fwd(int l);
  // Its mirror image: from dres (the gradient of the block's output) to dres = the gradient of its
  // input, adding the block's weight gradients into grads_buf (and the skip's share of x0 into dx0).
  void block_bwd(int l);
  // Backward of y = x W^T (x: [N, in] in matmul precision, W at offset w_off: [out, in]) from dy
  // (matmul precision): grads_buf[w_off] += dy^T x, then dtmp = dy W; each half in its own profiler region.
  void matmul_bwd(const char* dw_name, const char* dx_name, const void* dy, const void* x_mm, int64_t w_off,
                  int in, int out, int64_t N);
  // Host half of a forward: checks B x T against the arena and the token ids, and writes them
  // (with their bigram rows) to slot a; sets B and T.
  void stage_inputs(int64_t a, const int32_t* in, int B, int T);
  // The same for targets (with the token after next when the multi-token head runs: on, with
  // gradients enabled): the heads' divisors, from the host.
  GPT::LossCounts stage_targets(int64_t a, const int32_t* targets);
  // Device half: embedding, the blocks and the final norm over the selected slot's B x T tokens.
  void body_ops();
  void body_fwd(const int32_t* in, int B_, int T_) {  // both halves, in slot 0
    stage_inputs(0, in, B_, T_);
    use_slot(0);
    body_ops();
  }
  // Cached (inference) block l on N packed tokens in the `inf` scratch: each segment's keys and
  // values go into its area of kc/vc and its queries attend over that area.
  void block_cached(int l, int64_t N, const std::vector<KVSegment>& segs, float* kc, float* vc);
  // The multi-token head of a training forward (after the next-token head has written dxf):
  // its loss against the token after next within each row, the head's and mtp_proj's weight
  // gradients (into head_dw and mtp_dw) and its input gradient added to dxf, all scaled by
  // mtp_weight / `valid` (the positions with a target, from stage_targets). Adds the summed loss
  // to the device double *sum_d.
  void mtp_fwd(int64_t valid, double* sum_d);
  // The training/eval forward of staged slot a (targets: whether it has them), queued without a
  // read from the device (GPT::forward_deferred); per-token loss and argmax into loss_d / argmax_d
  // when asked.
  void queue_staged(int64_t a, bool targets, const GPT::LossCounts& c, bool rows_loss, bool rows_argmax,
                    double* sums_d);
  // Both halves in slot 0.
  GPT::LossCounts queue_forward(const int32_t* inputs, const int32_t* targets, int B, int T, bool rows_loss,
                                bool rows_argmax, double* sums_d);

  // ---- the LM head: one pass over rows in chunks, so the logits stay small (gpt_train.cpp) ----
  struct HeadNames {  // the profiler regions of the head's four steps
    const char *fwd, *xent, *dx, *dw;
  };
  enum class HeadMode {
    Logits,  // softcap the logits and copy them to the host (`out`, [n, Vp]), padding columns -inf
    Score,   // softcapped cross-entropy: summed loss, per-row loss and argmax where asked
    Train,   // Score, then its gradient scaled by gscale straight on, into dx (=) and head_dw (+=)
  };
  struct HeadPass {
    HeadMode mode;
    HeadNames names;
    int64_t chunk_rows;  // rows per chunk; `logits` holds chunk_rows rows of row_stride() floats
    float* logits;
    float gscale = 0;     // Score/Train: passed to softcap_xent
    float* out = nullptr;  // Logits: host, n x Vp
    double* loss_sum = nullptr;  // Score/Train: device accumulator of the summed loss (or null)
    int64_t ld = 0;              // row stride of `logits` in floats (0: Vp)
  };
  // One chunk as the pass sees it: its input rows (matmul precision) and, for Score/Train, the
  // device arrays of those rows: targets (null = none), per-row loss, argmax and input gradient
  // ([nr, d] fp32), each null when not wanted.
  struct HeadChunk {
    const void* x;
    const int32_t* tgt = nullptr;
    float* loss = nullptr;
    int32_t* amax = nullptr;
    float* dx = nullptr;
  };
  // Runs the head over n rows: for each chunk [r0, r0 + nr), rows(r0, nr) hands over its rows
  // (gathering them first if it must), the head matmul writes their logits, the mode's step
  // follows, then done(r0, nr) when given. Score/Train add each chunk's summed loss to
  // *p.loss_sum on the device, in chunk order.
  void head_pass(const HeadPass& p, int64_t n, const std::function<HeadChunk(int64_t, int64_t)>& rows,
                   const std::function<void(int64_t, int64_t)>& done = {});
  // The head over N contiguous rows of `x_mm` with chunk_rows and the training buffers: Train when
  // grad, else Score (device outputs indexed as the rows); the summed loss added to *loss_sum.
  void head_chunks(const HeadNames& names, const float* x_mm, const int32_t* tgt, int64_t N, float* loss,
                   int32_t* amax, bool grad, float gscale, float* dx, double* loss_sum);
  void infer_reserve(int64_t N, int T);
};

}  // namespace clm
