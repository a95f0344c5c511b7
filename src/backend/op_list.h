// The backend ops, each declared once: an X-macro list from which Backend's pure virtuals
// (backend.h), the profiling decorator's forwarding (profiled_backend.h), the CPU kernel table's
// entries and declarations (cpu/op_kernels.h) and the CUDA backend's plain launchers and overrides
// (cuda/kernels.h, cuda_backend.cpp) are generated.
//
// Entry: X(name, return type, (parameters), (arguments), cpu, cuda)
//   cpu:  table  the CPU kernel of that name has the op's signature: it goes into the kernel table
//                (one variant per instruction set) and the CPU backend forwards to it;
//         own    cpu_backend.cpp writes the op (dtype dispatch, argument unpacking, state).
//   cuda: stream the launcher cuda::name(stream, arguments...) is the whole op: its declaration
//                and the CUDA backend's override are generated;
//         own    cuda_backend.cpp writes the op (scratch memory, results, host-side work).
// Shapes and the accumulate (+=) or overwrite (=) rule of each op: the comment above its entry and
// backend/cpu/ops.h, optim_kernels.h, matmul.h. `out_t` names the dtype of an output that feeds a
// matmul (F32 or BF16). The types named here (Activation, NsSchedule) come from backend.h; a
// consumer that keeps only some entries needs only the types those use.
#pragma once

#include "backend/dtype.h"
#include "backend/op_args.h"

// Removes one level of parentheses: CLM_OP_UNPAREN (a, b) is a, b.
#define CLM_OP_UNPAREN(...) __VA_ARGS__
// Entry filters on a tag: CLM_OP_KEEP_<tag>(text) keeps `text` for table and stream, drops it for own.
#define CLM_OP_KEEP_table(...) __VA_ARGS__
#define CLM_OP_KEEP_stream(...) __VA_ARGS__
#define CLM_OP_KEEP_own(...)

// The list, each entry given to F(X, entry...): CLM_BACKEND_OPS below passes it on unchanged; a
// consumer that wants a subset passes an F that filters on a tag column.
#define CLM_BACKEND_OPS_WITH(F, X)                                                                 \
  /* ---- matmul and conversions ---- */                                                         \
  /* C[M,N] (=, or += when accumulate) A[M,K] B[K,N] (GemmArgs: storage and row strides). */    \
  F(X, gemm, void, (const GemmArgs& a), (a), own, own)                                           \
  F(X, f32_to_bf16, void, (const float* x, bf16* y, int64_t n), (x, y, n), table, stream)        \
  F(X, bf16_to_f32, void, (const bf16* x, float* y, int64_t n), (x, y, n), table, stream)        \
  /* ---- layers ---- */                                                                         \
  F(X, embedding_fwd, void, (const int32_t* tok, const float* wte, float* out, int64_t N,        \
    int64_t C), (tok, wte, out, N, C), table, stream)                                            \
  F(X, embedding_bwd, void, (const int32_t* tok, const float* dout, float* dwte, int64_t N,      \
    int64_t C), (tok, dout, dwte, N, C), table, own)                                             \
  /* The token embedding with token smearing (EmbedSmearArgs); its backward adds into dwte. */   \
  F(X, embed_smear_fwd, void, (const EmbedSmearArgs& a), (a), table, stream)                     \
  F(X, embed_smear_bwd, void, (const EmbedSmearBwdArgs& a), (a), table, own)                     \
  F(X, rmsnorm_fwd, void, (const RmsnormFwdArgs& a), (a), own, own)                             \
  F(X, rmsnorm_bwd, void, (const RmsnormBwdArgs& a), (a), table, own)                            \
  F(X, rope_tables, void, (float* cos_t, float* sin_t, int T, int hd, float base),               \
    (cos_t, sin_t, T, hd, base), table, own)                                                     \
  F(X, rope_fwd, void, (float* x, int64_t rows, int T, int hd, const float* cos_t,               \
    const float* sin_t, int pos0), (x, rows, T, hd, cos_t, sin_t, pos0), table, stream)          \
  F(X, qkv_heads_fwd, void, (const QkvHeadsFwdArgs& a), (a), own, own)                           \
  F(X, qkv_heads_bwd, void, (const QkvHeadsBwdArgs& a), (a), own, own)                           \
  /* Causal attention; window > 0 limits each query to the `window` most recent keys (its */     \
  /* own included), window <= 0 to none (full causal). */                                        \
  F(X, attention_fwd, void, (const AttentionFwdArgs& a), (a), own, own)                          \
  F(X, attention_bwd, void, (const AttentionBwdArgs& a), (a), own, own)                          \
  F(X, split_heads, void, (const SplitHeadsArgs& a), (a), table, stream)                         \
  F(X, merge_heads, void, (const MergeHeadsArgs& a), (a), own, stream)                           \
  /* h: the MLP pre-activation [N, Hd] ([N, 2Hd] = [up | gate] for SwiGLU); y: [N, Hd]. */       \
  F(X, activation_fwd, void, (Activation act, const float* h, void* y, DType out_t, int64_t N,   \
    int64_t Hd), (act, h, y, out_t, N, Hd), own, own)                                            \
  F(X, activation_bwd, void, (Activation act, const float* h, const float* dy, void* dh,         \
    DType out_t, int64_t N, int64_t Hd), (act, h, dy, dh, out_t, N, Hd), own, own)               \
  F(X, residual_fwd, void, (const float* a, const float* b, float* out, int64_t n),              \
    (a, b, out, n), table, stream)                                                               \
  /* Two-term mix with weights on the device (the embedding skips): out = w[0] x + w[1] x0 */     \
  /* (out may alias x); its backward: Mix2BwdArgs. */                                            \
  F(X, mix2_fwd, void, (const float* x, const float* x0, const float* w, float* out, int64_t n), \
    (x, x0, w, out, n), table, stream)                                                           \
  F(X, mix2_bwd, void, (const Mix2BwdArgs& a), (a), table, own)                                  \
  F(X, scale, void, (float* x, float s, int64_t n), (x, s, n), own, stream) /* x *= s */         \
  F(X, axpy, void, (float* y, float a, const float* x, int64_t n), (y, a, x, n), own,            \
    stream) /* y += a x */                                                                       \
  /* Softcap + cross-entropy (+ its gradient in place when want_grad); the summed loss over */   \
  /* targets >= 0 is added to the device double a.loss_sum (no wait); loss/argmax may be null. */\
  F(X, softcap_xent, void, (const SoftcapXentArgs& a), (a), own, own)                            \
  F(X, softcap_fwd, void, (float* z, int64_t n, float cap), (z, n, cap), table, stream)          \
  /* ---- optimizer ---- */                                                                      \
  /* out[i] (device doubles) = the sum of squares of xs[i][0..ns[i]) in double, the same bits */ \
  /* whatever the thread count, for i < count (the optimizer's per-parameter sums; no wait). */  \
  F(X, sum_squares_many, void, (const float* const* xs, const int64_t* ns, int count,            \
    double* out), (xs, ns, count, out), own, own)                                                \
  /* The step's gradient norm, clip scale and finite flag from those sums, on the device. */     \
  F(X, grad_clip, void, (const GradClipArgs& a), (a), table, stream)                             \
  /* Decoupled weight decay p *= 1 - lr wd; with `cautious` only where the update (the step */   \
  /* subtracted from p) has p's sign, i.e. already moves p towards zero. */                      \
  F(X, adamw_update, void, (const AdamWArgs& a), (a), own, stream)                                  \
  F(X, muon_momentum, void, (const MuonMomentumArgs& a), (a), table, stream)                        \
  F(X, muon_apply, void, (const MuonApplyArgs& a), (a), table, stream)                              \
  F(X, normuon_scale, void, (const NormuonScaleArgs& a), (a), table, own)                        \
  /* out (rows x cols) = the Newton-Schulz orthogonalisation of G (may alias) by `sched`; */      \
  /* matmuls in `prec`. */                                                                       \
  F(X, newton_schulz, void, (const float* G, float* out, int64_t rows, int64_t cols,             \
    const NsSchedule& sched, MatPrec prec), (G, out, rows, cols, sched, prec), own, own)        \
  /* newton_schulz on each of a.count matrices, all with one schedule and precision, each */     \
  /* result that of newton_schulz on it alone (up to the matmul library's rounding); the */      \
  /* backend may order and overlap them as it likes. */                                          \
  F(X, newton_schulz_many, void, (const NewtonSchulzManyArgs& a), (a), own, own)

// Every op: X(name, R, (params), (args), cpu, cuda).
#define CLM_OP_PASS(X, ...) X(__VA_ARGS__)
#define CLM_BACKEND_OPS(X) CLM_BACKEND_OPS_WITH(CLM_OP_PASS, X)
