// Every layer of the GPT as a visible forward/backward pair: plain functions on raw pointers and
// shapes, parallelised with OpenMP (static schedules and fixed-order reductions, so results are
// bit-identical for a given thread count). The exact math is written down in docs/MODEL.md.
//
// Conventions: activations are row-major fp32. "N" is a number of token rows (B*T). A backward
// function either writes its input gradient or ADDS into it; each says which. Parameter
// gradients are always accumulated (+=), because gradient accumulation and tied weights need it.
#pragma once
#include <cstdint>

#include "backend/cpu/matmul.h"
#include "backend/cpu/op_kernels.h"

namespace clm {

// --- token embedding --------------------------------------------------------------------------
// embedding_fwd (op_kernels.h): out[n,:] = wte[tok[n],:]
// embedding_bwd (op_kernels.h): dwte[tok[n],:] += dout[n,:]  (parallel over columns, so no two
// threads touch one element)

// embed_smear_fwd / embed_smear_bwd (op_kernels.h): the token embedding with token smearing
// (op_args.h EmbedSmearArgs). The backward's parameter sums run over fixed chunks of 256 positions
// in double, added in chunk order; the table rows' gradient is scattered as in embedding_bwd.

// --- RMSNorm over the last dimension -------------------------------------------------------------
// y = x * rstd (* g when g != nullptr), rstd = 1/sqrt(mean(x^2) + eps) saved per row for backward.
void rmsnorm_fwd(const float* x, const float* g, float* y, float* rstd, int64_t rows, int64_t C,
                 float eps);
// The same over the rows x + res, written to sum first (the residual add fused in; sum may alias x
// or res); res null: rmsnorm_fwd.
void residual_rmsnorm_fwd(const float* x, const float* res, float* sum, const float* g, float* y, float* rstd,
                          int64_t rows, int64_t C, float eps);
// rmsnorm_bwd (op_kernels.h): dx += d/dx  (accumulates: the residual stream also carries a
// gradient); dg += d/dg if g.

// --- rotary position embedding ----------------------------------------------------------------
// rope_tables (op_kernels.h): tables for positions [0, T): cos/sin[t*(hd/2) + i] of angle
// t * base^(-2i/hd).
// rope_fwd (op_kernels.h): x is `rows` rows of hd (layout [.., T, hd]); row r is at position
// pos0 + r % T. Rotate-half convention: pairs (x[i], x[i+hd/2]) are rotated by angle_i. In place.
// Inverse rotation of the gradient, in place.
void rope_bwd(float* dx, int64_t rows, int T, int hd, const float* cos_t, const float* sin_t,
              int pos0 = 0);

// --- causal multi-head attention (grouped-query), tiled with an online softmax -------------------
// q: [B, H, Tq, hd]; k, v: [B, Hkv, Tk_cap, hd] of which the first Tk positions are valid;
// query i sits at absolute position p = Tk - Tq + i and attends to keys 0..p, or with window > 0
// to keys p - window + 1..p only (sliding-window attention; window <= 0: all of them).
// Query head h reads kv head h / (H/Hkv). o: [B, H, Tq, hd]; lse (may be null): [B, H, Tq], the
// log-sum-exp of the scaled scores, which backward uses to recompute the probabilities.
// No T x T matrix is ever formed: memory is O(tile^2) per thread.
void attention_fwd(const float* q, const float* k, const float* v, float* o, float* lse, int B,
                   int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window);
// Backward for Tq == Tk == Tk_cap == T. Recomputes scores tile by tile from q, k and lse.
// Writes dq (=), dk (=), dv (=). Parallel over (b, kv head): deterministic.
void attention_bwd(const float* q, const float* k, const float* v, const float* o,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                   int H, int Hkv, int T, int hd, int window);
// The same two ops with bf16 products and fp32 accumulation (attention_bf16.cpp): q, k, v, P (and
// dO, dS) rounded to bf16, softmax statistics and sums in fp32; deterministic as above. Available
// only with the avx512 kernel variant on a CPU with AVX512_BF16; calling them otherwise throws.
bool attention_bf16_available();
void attention_fwd_bf16(const float* q, const float* k, const float* v, float* o, float* lse, int B,
                        int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window);
void attention_bwd_bf16(const float* q, const float* k, const float* v, const float* o,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                        int H, int Hkv, int T, int hd, int window);

// --- head layout changes around attention ---------------------------------------------------------
// x: [B*T rows, row stride ld], nh*hd columns starting at x  <->  y: [B, nh, T, hd] (split_heads:
// op_kernels.h, SplitHeadsArgs).
void merge_heads(const float* y, float* x, int64_t ld, int B, int T, int nh, int hd);

// Fused attention input stage, one pass over the qkv matmul output (row stride ld = (H+2Hkv)*hd,
// columns [q | k | v]): split into heads, optional per-head RMSNorm (qk-norm, gains qg/kg may be
// null), RoPE at positions 0..T-1. Writes q [B,H,T,hd], k, v [B,Hkv,T,hd]; with qk_norm also the
// pre-norm heads qraw/kraw and their rstd ([B*H*T], [B*Hkv*T]) for backward.
// Equivalent to split_heads + rmsnorm_fwd + rope_fwd (tested against them).
void qkv_heads_fwd(const float* qkv, const float* ve, const int32_t* tok, int B, int T, int H, int Hkv, int hd, bool qk_norm,
                   const float* qg, const float* kg, float eps, const float* cos_t,
                   const float* sin_t, float* qraw, float* kraw, float* q_rstd, float* k_rstd,
                   float* q, float* k, float* v);
// Its backward: from dq, dk, dv (head layouts) to dqkv [N, (H+2Hkv)*hd] (=), written as fp32 or
// bf16; dqg/dkg += gain gradients (when the gains exist).
template <typename OutT>
void qkv_heads_bwd(const float* dq, const float* dk, const float* dv, const float* qraw,
                   const float* kraw, const float* q_rstd, const float* k_rstd, const float* qg,
                   const float* kg, float* dqg, float* dkg, int B, int T, int H, int Hkv, int hd,
                   bool qk_norm, const float* cos_t, const float* sin_t, OutT* dqkv);

// Variants that write their output straight into a bf16 matmul input (saves a pass over memory).
void residual_rmsnorm_fwd(const float* x, const float* res, float* sum, const float* g, bf16* y, float* rstd,
                          int64_t rows, int64_t C, float eps);
void rmsnorm_fwd(const float* x, const float* g, bf16* y, float* rstd, int64_t rows, int64_t C,
                 float eps);
void merge_heads(const float* y, bf16* x, int64_t ld, int B, int T, int nh, int hd);

// --- MLP activations ----------------------------------------------------------------------------
void relu2_fwd(const float* x, float* y, int64_t n);                        // y = max(x,0)^2
void relu2_bwd(const float* x, const float* dy, float* dx, int64_t n);       // dx = (=)
void gelu_fwd(const float* x, float* y, int64_t n);                         // tanh approximation
void gelu_bwd(const float* x, const float* dy, float* dx, int64_t n);
// hg: [N, 2*Hd] = [up | gate] per row; y[N, Hd] = up * silu(gate). dhg (=) [N, 2*Hd].
void swiglu_fwd(const float* hg, float* y, int64_t N, int64_t Hd);
void swiglu_bwd(const float* hg, const float* dy, float* dhg, int64_t N, int64_t Hd);

// bf16-output variants (forward output feeds the next matmul; backward output feeds the dW/dx
// matmuls of the up projection).
void relu2_fwd(const float* x, bf16* y, int64_t n);
void relu2_bwd(const float* x, const float* dy, bf16* dx, int64_t n);
void gelu_fwd(const float* x, bf16* y, int64_t n);
void gelu_bwd(const float* x, const float* dy, bf16* dx, int64_t n);
void swiglu_fwd(const float* hg, bf16* y, int64_t N, int64_t Hd);
void swiglu_bwd(const float* hg, const float* dy, bf16* dhg, int64_t N, int64_t Hd);

// --- residual add -------------------------------------------------------------------------------
// residual_fwd (op_kernels.h): out = a + b. Its backward is the identity into both inputs: callers
// route the gradient (the residual stream gradient is shared, and branch ops accumulate into it).
void residual_bwd(const float* dout, float* da, float* db, int64_t n);  // da += dout, db += dout

// --- two-term mix (mix2_fwd / mix2_bwd, op_kernels.h): out = w0 x + w1 x0 -----------------------
// The backward's two sums run over fixed 16K-element chunks in double, added in chunk order.

// --- softcapped logits fused with cross-entropy --------------------------------------------------
// logits: N rows of Vp raw z = x W_head^T at row stride ld >= Vp, of which the first V columns are
// real (padding ignored; the columns from Vp to ld are not touched).
// Softcap s = cap*tanh(z/cap) (cap <= 0: s = z). loss[n] = logsumexp(s[n,:V]) - s[n,target]
// (0 where target < 0). argmax[n] = argmax over the real vocabulary (may be null).
// If want_grad, logits is overwritten IN PLACE with d(grad_scale * sum_n loss[n]) / dz (0 in the
// padding and on ignored rows), so one buffer serves forward and backward; where grad_bf16
// is given, the gradient goes there instead, rounded to bf16 (round to nearest even: the bits of
// f32_to_bf16 of the fp32 gradient) and the logits are left unspecified: the bf16 head matmuls'
// input without another pass. With a cap in (0, 40] the logits are then only read (no write-back
// of the fp32 logits to memory), as they are without want_grad.
// Returns sum of loss over non-ignored rows (double, fixed-order).
double softcap_xent(float* logits, const int32_t* targets, int64_t N, int V, int Vp, int64_t ld, float cap,
                    float* loss, int32_t* argmax, bool want_grad, float grad_scale, bf16* grad_bf16 = nullptr);
// softcap_fwd (op_kernels.h): the softcap alone (for sampling), s = cap*tanh(z/cap), in place.

}  // namespace clm
