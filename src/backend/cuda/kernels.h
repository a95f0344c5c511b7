// Host-side launchers of the CUDA backend's kernels (ops.cu, attention.cu, optim.cu). Each mirrors
// one function of backend/cpu/ops.h or optim_kernels.h: same shapes, same = / += rule. Every
// launcher only enqueues work on `st` (no host synchronisation); the caller checks the launch.
// Ops that need temporary device memory say how much (`*_scratch`) and take it as `scratch`.
// Plain C++ declarations, so cuda_backend.cpp is compiled by the host compiler.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/op_list.h"

// The launchers that are a whole op, the op list's `stream` entries (backend/op_list.h, where their
// contracts are): X(name, return type, (parameters), (arguments)); each is declared below as
// name(stream, parameters...) and cuda_backend.cpp's override of it is generated.
#define CLM_CUDA_STREAM_ENTRY(X, name, R, params, args, cpu, cuda) CLM_OP_KEEP_##cuda(X(name, R, params, args))
#define CLM_CUDA_STREAM_OPS(X) CLM_BACKEND_OPS_WITH(CLM_CUDA_STREAM_ENTRY, X)

namespace clm::cuda {

using bf16_t = uint16_t;  // raw bfloat16 bits, as backend/dtype.h

#define CLM_CUDA_STREAM_DECLARE(name, R, params, args) R name(cudaStream_t st, CLM_OP_UNPAREN params);
CLM_CUDA_STREAM_OPS(CLM_CUDA_STREAM_DECLARE)
#undef CLM_CUDA_STREAM_DECLARE

// ---- embedding ---------------------------------------------------------------------------------
size_t embedding_bwd_scratch(int64_t N);
// dwte[tok[n]] += dout[n], each row summed in token order (a sort of (token, n), no float atomics).
void embedding_bwd(cudaStream_t st, const int32_t* tok, const float* dout, float* dwte, int64_t N,
                   int64_t C, void* scratch);

// The token embedding with token smearing's backward (EmbedSmearBwdArgs): the rows' gradients
// through embedding_bwd's sorted sums (wte[tok] rows first, then wte[prev] rows), the parameter
// sums in position order in double.
size_t embed_smear_bwd_scratch(int64_t N, int64_t C, int k);
void embed_smear_bwd(cudaStream_t st, const EmbedSmearBwdArgs& a, void* scratch);

// ---- RMSNorm -----------------------------------------------------------------------------------
// With res (may be null) the rows are x + res, written to sum first (the residual add fused in).
void rmsnorm_fwd(cudaStream_t st, const float* x, const float* res, float* sum, const float* g, void* y, bool y_bf16,
                 float* rstd, int64_t rows, int64_t C, float eps);
size_t rmsnorm_bwd_scratch(int64_t rows, int64_t C);
void rmsnorm_bwd(cudaStream_t st, const float* x, const float* g, const float* rstd,
                 const float* dy, float* dx, float* dg, int64_t rows, int64_t C, void* scratch);

// ---- RoPE, heads -------------------------------------------------------------------------------
void qkv_heads_fwd(cudaStream_t st, const float* qkv, const float* ve, const int32_t* tok, int B, int T, int H,
                   int Hkv, int hd,
                   bool qk_norm, const float* qg, const float* kg, float eps, const float* cos_t,
                   const float* sin_t, float* qraw, float* kraw, float* q_rstd, float* k_rstd,
                   float* q, float* k, float* v);
size_t qkv_heads_bwd_scratch(int B, int T, int H, int Hkv, int hd);
void qkv_heads_bwd(cudaStream_t st, const float* dq, const float* dk, const float* dv,
                   const float* qraw, const float* kraw, const float* q_rstd, const float* k_rstd,
                   const float* qg, const float* kg, float* dqg, float* dkg, int B, int T, int H,
                   int Hkv, int hd, bool qk_norm, const float* cos_t, const float* sin_t,
                   void* dqkv, bool out_bf16, void* scratch);

// ---- attention (attention.cu) -------------------------------------------------------------------
int attention_max_head_dim();
// Shared memory per block the attention kernels need at this head_dim (the largest of forward and
// backward): more than the 48 KiB default, so a device must offer it as opt-in.
size_t attention_smem_bytes(int hd);
void attention_fwd(cudaStream_t st, const float* q, const float* k, const float* v, float* o,
                   float* lse, int B, int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window);
size_t attention_bwd_scratch(int B, int H, int T);
void attention_bwd(cudaStream_t st, const float* q, const float* k, const float* v, const float* o,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                   int H, int Hkv, int T, int hd, int window, void* scratch);

// ---- MLP activations (act: 0 relu2, 1 gelu (tanh form), 2 swiglu) -------------------------------
void activation_fwd(cudaStream_t st, int act, const float* h, void* y, bool y_bf16, int64_t N,
                    int64_t Hd);
void activation_bwd(cudaStream_t st, int act, const float* h, const float* dy, void* dh,
                    bool dh_bf16, int64_t N, int64_t Hd);

// ---- element-wise ------------------------------------------------------------------------------
size_t mix2_bwd_scratch(int64_t n);
void mix2_bwd(cudaStream_t st, const float* dout, const float* x, const float* x0, const float* w, float* dx,
              float* dx0, float* dw, int64_t n, void* scratch);
size_t softcap_xent_scratch(int64_t N);
// Rows of logits (and grad_bf16) are ld elements apart. Adds the summed loss (double) to the
// device accumulator *total (none when null). With want_grad
// the gradient goes into logits, or with grad_bf16 set into grad_bf16 only (in the same pass).
void softcap_xent(cudaStream_t st, float* logits, const int32_t* targets, int64_t N, int V, int Vp,
                  int64_t ld, float cap, float* loss, int32_t* argmax, bool want_grad, float grad_scale,
                  bf16_t* grad_bf16, void* scratch, double* total);

// ---- optimizer (optim.cu) ----------------------------------------------------------------------
size_t sum_squares_scratch(int64_t n);
void sum_squares(cudaStream_t st, const float* x, int64_t n, double* out, void* scratch);
// NorMuon's row normalisation (Backend::normuon_scale); scratch: normuon_scale_scratch(rows).
size_t normuon_scale_scratch(int64_t rows);
void normuon_scale(cudaStream_t st, const NormuonScaleArgs& a, void* scratch);
// Newton-Schulz start and end: X (a x b, the short side first) = G or G^T times
// 1/(sqrt(*ss) * margin + 1e-7); out = X or X^T back in G's shape.
void ns_load(cudaStream_t st, const float* G, float* X, int64_t rows, int64_t cols, bool tr,
             const double* ss, float margin);
void ns_store(cudaStream_t st, const float* X, float* out, int64_t rows, int64_t cols, bool tr);
// A stack of same-shape Newton-Schulz matrices (backend/ns_groups.h): member k's input, output
// and whether it is stored transposed (b x a). The table lives in device memory.
struct NsMember {
  const float* G;
  float* out;
  int tr;
};
// Bytes of scratch ns_stack_load needs for `count` matrices of n elements: their sums of squares
// and the per-chunk partial sums.
size_t ns_stack_scratch(int count, int64_t n);
// X (count matrices of a x b, one after another) = each member's G (or G^T) normalised by its own
// Frobenius norm, each sum of squares the bits sum_squares gives that matrix alone.
void ns_stack_load(cudaStream_t st, const NsMember* m, float* X, int count, int64_t a, int64_t b,
                   float margin, void* scratch);
// Each member's out = its X (or X^T) in the stack.
void ns_stack_store(cudaStream_t st, const NsMember* m, const float* X, int count, int64_t a, int64_t b);

}  // namespace clm::cuda
