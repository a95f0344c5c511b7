// Argument structs of the backend ops that take many arguments (backend.h). Each op takes one
// struct whose fields are named and grouped by role (shape, inputs, saved state, outputs), and
// callers fill it with designated initialisers, so two swapped pointers read wrong at the call
// site instead of compiling silently. Semantics of every field: backend/cpu/ops.h and
// backend/cpu/optim_kernels.h, whose kernels these mirror.
#pragma once
#include <cstdint>

#include "backend/dtype.h"

namespace clm {

struct NsSchedule;  // backend.h

// C[M,N] (=, or += when accumulate) A[M,K] B[K,N]. A is stored [M,K] or, trans_a, [K,M]; B
// [K,N] or, trans_b, [N,K]; each stored matrix is row-major with the row stride given (lda, ldb,
// ldc, in elements; 0: its stored width, i.e. packed). A and B hold bf16 (prec BF16) or fp32;
// C is fp32. A row stride wider than the matrix lets a caller keep rows off the power-of-two
// strides at which CPU caches alias (ModelLayout's logits_ld).
struct GemmArgs {
  MatPrec prec = MatPrec::F32;
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  const void* A = nullptr;
  const void* B = nullptr;
  float* C = nullptr;
  bool accumulate = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  // The stored row strides, packed where 0.
  int64_t a_ld() const { return lda > 0 ? lda : (trans_a ? M : K); }
  int64_t b_ld() const { return ldb > 0 ? ldb : (trans_b ? K : N); }
  int64_t c_ld() const { return ldc > 0 ? ldc : N; }
};

// RMSNorm over the last dimension of `rows` rows of C: y = x rstd (* g where g is given), written
// in out_t; rstd = 1/sqrt(mean(x^2) + eps) saved per row for backward. With `residual` the op is
// fused with the residual add before it: the rows normalised are s = x + residual (an fp32 add),
// written to `sum` (which may alias x or residual), so the stream is read once.
struct RmsnormFwdArgs {
  int64_t rows = 0, C = 0;
  float eps = 0;
  const float* x = nullptr;
  const float* g = nullptr;  // may be null (no gain)
  const float* residual = nullptr;  // may be null (no add)
  float* sum = nullptr;             // with residual: x + residual (=)
  // outputs
  void* y = nullptr;
  DType out_t = DType::F32;
  float* rstd = nullptr;
};

// RMSNorm's backward over `rows` rows of C, from the rstd its forward saved: dx += the input
// gradient (the residual stream also carries one), dg += the gain gradient where g is given.
struct RmsnormBwdArgs {
  int64_t rows = 0, C = 0;
  const float* x = nullptr;
  const float* g = nullptr;  // may be null (no gain; dg then unused)
  const float* rstd = nullptr;
  const float* dy = nullptr;
  // outputs (+=)
  float* dx = nullptr;
  float* dg = nullptr;
};

// The head layout change around attention: x, B*T rows of row stride ld holding nh*hd columns
// from x on  <->  y, [B, nh, T, hd]. split_heads writes y (=), merge_heads x (=, in out_t).
struct SplitHeadsArgs {
  int B = 0, T = 0, nh = 0, hd = 0;
  int64_t ld = 0;
  const float* x = nullptr;
  float* y = nullptr;
};
struct MergeHeadsArgs {
  int B = 0, T = 0, nh = 0, hd = 0;
  int64_t ld = 0;
  const float* y = nullptr;
  void* x = nullptr;
  DType out_t = DType::F32;
};

// Grouped-query attention heads: B sequences, H query heads reading Hkv key/value heads of hd.
struct HeadShape {
  int B = 0, H = 0, Hkv = 0, hd = 0;
};

// Per-head RMSNorm of q and k (model.qk_norm): gains qg/kg (may be null) and its epsilon.
struct QkNorm {
  bool on = false;
  const float* qg = nullptr;
  const float* kg = nullptr;
  float eps = 0;
};

// RoPE tables for positions [0, T) (Backend::rope_tables).
struct RopeTables {
  const float* cos_t = nullptr;
  const float* sin_t = nullptr;
};

// The fused attention input stage: qkv [B*T, (H+2Hkv)*hd] to q [B,H,T,hd], k, v [B,Hkv,T,hd],
// with qk-norm (whose pre-norm heads and rstd are saved for backward) and RoPE; with a value
// embedding table `ve` [V, Hkv*hd], v also gets the row of each position's token (tok [B*T]) added
// in the same pass.
struct QkvHeadsFwdArgs {
  HeadShape shape;
  int T = 0;
  QkNorm norm;
  RopeTables rope;
  const float* qkv = nullptr;
  const float* ve = nullptr;       // may be null (no value embedding)
  const int32_t* tok = nullptr;    // with ve
  // saved for backward (written only with norm.on)
  float* qraw = nullptr;
  float* kraw = nullptr;
  float* q_rstd = nullptr;
  float* k_rstd = nullptr;
  // outputs
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
};

// Its backward: dq, dk, dv to dqkv (=, in dqkv_t), gain gradients dqg/dkg (+=).
struct QkvHeadsBwdArgs {
  HeadShape shape;
  int T = 0;
  QkNorm norm;  // eps unused: the saved rstd carry it
  RopeTables rope;
  const float* dq = nullptr;
  const float* dk = nullptr;
  const float* dv = nullptr;
  // saved by forward
  const float* qraw = nullptr;
  const float* kraw = nullptr;
  const float* q_rstd = nullptr;
  const float* k_rstd = nullptr;
  // outputs
  float* dqg = nullptr;
  float* dkg = nullptr;
  void* dqkv = nullptr;
  DType dqkv_t = DType::F32;
};

// Causal attention of Tq queries at positions Tk-Tq.. over the first Tk of Tk_cap cached keys;
// window > 0 limits each query to its `window` most recent keys. lse may be null.
struct AttentionFwdArgs {
  HeadShape shape;
  int Tq = 0, Tk = 0, Tk_cap = 0;
  int window = 0;
  // The model's matmul precision: BF16 lets a backend form the products from bf16 operands with
  // fp32 accumulation (the CPU's bf16 attention); F32 asks for fp32 products.
  MatPrec prec = MatPrec::F32;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* o = nullptr;
  float* lse = nullptr;
};

// Its backward for Tq == Tk == Tk_cap == T: dq, dk, dv (=).
struct AttentionBwdArgs {
  HeadShape shape;
  int T = 0;
  int window = 0;
  MatPrec prec = MatPrec::F32;  // as AttentionFwdArgs::prec
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* o = nullptr;
  const float* lse = nullptr;
  const float* dout = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

// Softcap + cross-entropy over logits [N, Vp] (first V real); see Backend::softcap_xent.
struct SoftcapXentArgs {
  int64_t N = 0;
  int V = 0, Vp = 0;
  float cap = 0;
  float* logits = nullptr;            // gradient written here in place with want_grad, unless grad_bf16
  const int32_t* targets = nullptr;   // null or < 0: ignored rows
  float* loss = nullptr;              // per-row loss (may be null)
  // Device accumulator (or null): += the summed loss over targets >= 0. Double, so that the chunks
  // of a head pass add up exactly as the host-side sum they replace (a float would round each).
  double* loss_sum = nullptr;
  int32_t* argmax = nullptr;          // may be null
  bool want_grad = false;
  float grad_scale = 1.0f;
  bf16* grad_bf16 = nullptr;          // with want_grad: the gradient rounded to bf16 here (or null), logits then unspecified
  // Row stride of logits and grad_bf16 in elements (0: Vp); the columns from Vp on are not touched.
  int64_t ld = 0;
  int64_t row_stride() const { return ld > 0 ? ld : Vp; }
};

// The two-term mix's backward (Backend::mix2_fwd: out = w[0] x + w[1] x0) from dout: dw[0] +=
// sum dout x, dw[1] += sum dout x0 (in double, in a fixed order, so the same bits whatever the
// thread count), dx0 += w[1] dout, dx = w[0] dout (dx may alias dout).
struct Mix2BwdArgs {
  int64_t n = 0;
  const float* dout = nullptr;
  const float* x = nullptr;
  const float* x0 = nullptr;
  const float* w = nullptr;
  float* dx = nullptr;
  float* dx0 = nullptr;
  float* dw = nullptr;
};

// Token smearing fused with the token embedding (model.smear): row i of out is
//   wte[tok[i]] + lam s_i wte[prev[i]],   s_i = sigmoid(sum_{c<k} g[c] wte[tok[i]][c]),
// with w = [lam, g[0], ..., g[k-1]] on the device and prev[i] < 0 meaning no previous token (the
// row is then the plain embedding). The gate reads the token's own first k channels, so each
// position decides how much of its predecessor's embedding to take in.
struct EmbedSmearArgs {
  int64_t N = 0, C = 0;
  int k = 0;  // gate width, 1 <= k <= C
  const int32_t* tok = nullptr;
  const int32_t* prev = nullptr;
  const float* wte = nullptr;
  const float* w = nullptr;
  float* out = nullptr;  // [N, C] (=)
};

// Its backward from dout [N, C]: dwte += the table rows' gradient (through both lookups and the
// gate), dw += (d lam, d g) summed in double in a fixed order (the same bits whatever the thread
// count).
struct EmbedSmearBwdArgs {
  int64_t N = 0, C = 0;
  int k = 0;
  const int32_t* tok = nullptr;
  const int32_t* prev = nullptr;
  const float* wte = nullptr;
  const float* w = nullptr;
  const float* dout = nullptr;
  float* dwte = nullptr;  // +=
  float* dw = nullptr;    // +=, 1 + k values
};

// The gradient clip of one optimizer step, in device memory: written by grad_clip on the device
// and read there by the update ops, so that no value goes back to the host inside the step. When
// `finite` is 0 the update ops leave every parameter and moment as it is.
struct GradClip {
  float norm = 0;       // the global gradient norm, before clipping
  float gscale = 1.0f;  // the factor the gradients are multiplied by
  int32_t finite = 1;   // the norm and every checked loss are finite: the update happens
  int32_t pad = 0;
};

// grad_clip's inputs: the per-parameter sums of squares part[0..count) (device doubles), added in
// that order, norm = float(sqrt(sum)), gscale = max_norm / (norm + 1e-6f) when max_norm > 0 and
// norm > max_norm, else 1; finite = norm and checks[0..n_checks) (device doubles: the step's
// summed losses) all finite.
struct GradClipArgs {
  int count = 0;
  const double* part = nullptr;
  float max_norm = 0;
  const double* checks = nullptr;
  int n_checks = 0;
  GradClip* out = nullptr;
};

// A parameter group's hyperparameters that change from step to step, in device memory, written
// by the host before the step's ops are queued (a recorded step replays with new ones).
struct GroupStep {
  float lr = 0, wd = 0;
  float mu = 0;    // Muon's momentum
  int32_t pad = 0;
  int64_t t = 1;   // AdamW's step count (1-based), for its bias corrections
};

// AdamW's fixed hyperparameters.
struct AdamWHyper {
  float beta1 = 0, beta2 = 0, eps = 0;
  bool cautious = false;
};

// One AdamW step on n floats: grad (scaled by clip->gscale) updates m, v and then p with step->lr,
// step->wd and step->t; nothing when clip->finite is 0. clip and step are device pointers.
struct AdamWArgs {
  int64_t n = 0;
  float* p = nullptr;
  const float* grad = nullptr;
  const GradClip* clip = nullptr;
  const GroupStep* step = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  AdamWHyper hyper;
};

// Muon's momentum on n floats, g = grad clip->gscale, mu = step->mu: buf = mu buf + g;
// u = nesterov ? g + mu buf : buf. Nothing when clip->finite is 0 (device pointers).
struct MuonMomentumArgs {
  int64_t n = 0;
  const float* grad = nullptr;
  const GradClip* clip = nullptr;
  const GroupStep* step = nullptr;
  bool nesterov = false;
  float* buf = nullptr;  // updated in place
  float* u = nullptr;    // the update to orthogonalise
};

// Muon's step on n floats, lr = step->lr, wd = step->wd: p = p (1 - lr wd) - lr scale o; with
// `cautious` the decay only where o p > 0. Nothing when clip->finite is 0 (device pointers).
struct MuonApplyArgs {
  int64_t n = 0;
  float* p = nullptr;
  const float* o = nullptr;  // the orthogonalised update
  const GradClip* clip = nullptr;
  const GroupStep* step = nullptr;
  float scale = 1.0f;
  bool cautious = false;
};

// NorMuon's neuron-wise normalisation of an orthogonalised update o [rows, cols], in place:
// v[r] = beta2 v[r] + (1 - beta2) mean_c o[r,c]^2, each row divided by sqrt(v[r]) + eps, then
// the whole rescaled to o's Frobenius norm (so the learning rate keeps Muon's calibration).
// Nothing when clip->finite is 0 (v is state; clip is a device pointer).
struct NormuonScaleArgs {
  int64_t rows = 0, cols = 0;
  float* o = nullptr;
  float* v = nullptr;  // [rows], the second-moment state
  float beta2 = 0, eps = 0;
  const GradClip* clip = nullptr;
};

// Newton-Schulz over `count` matrices: out[i] (rows[i] x cols[i]) = the orthogonalisation of
// G[i] (out[i] may alias G[i], no other overlap) by *sched, matmuls in prec. The arrays hold
// host-side pointers and shapes; the matrices live on the device.
struct NewtonSchulzManyArgs {
  int count = 0;
  const float* const* G = nullptr;
  float* const* out = nullptr;
  const int64_t* rows = nullptr;
  const int64_t* cols = nullptr;
  const NsSchedule* sched = nullptr;
  MatPrec prec = MatPrec::BF16;
};

}  // namespace clm
