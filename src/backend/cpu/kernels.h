// The kernel table: one entry per function of ops.h, optim_kernels.h and op_kernels.h (the array
// fp32 <-> bf16 conversions among them). Every compiled instruction-set variant (kernel_isa.h)
// fills one table; the public functions (kernel_dispatch.cpp) call through the table of the
// selected variant (cpu_features.cpp), so callers never see the variants. Internal to backend/cpu.
#pragma once
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/op_kernels.h"

// X(field, function, return type, (parameters), (arguments)). `field` tells overloads apart.
// The kernels that are Backend ops with the same signature come from the op list
// (CLM_CPU_BACKEND_KERNELS, op_kernels.h); the CPU backend's overrides of them are generated from
// it (cpu_backend.cpp). The other kernels, below: variants per output dtype, the parts that
// Backend ops compose, and those whose Backend op takes an argument struct the kernel does not.
// qkv_heads_bwd is a template declared in ops.h and has two fields of its own (below).
#define CLM_CPU_OTHER_KERNELS(X)                                                                 \
  X(rmsnorm_fwd, rmsnorm_fwd, void, (const float* x, const float* g, float* y, float* rstd,      \
    int64_t rows, int64_t C, float eps), (x, g, y, rstd, rows, C, eps))                          \
  X(rmsnorm_fwd_bf16, rmsnorm_fwd, void, (const float* x, const float* g, bf16* y, float* rstd,  \
    int64_t rows, int64_t C, float eps), (x, g, y, rstd, rows, C, eps))                          \
  X(residual_rmsnorm_fwd, residual_rmsnorm_fwd, void, (const float* x, const float* res,         \
    float* sum, const float* g, float* y, float* rstd, int64_t rows, int64_t C, float eps), (x,  \
    res, sum, g, y, rstd, rows, C, eps))                                                         \
  X(residual_rmsnorm_fwd_bf16, residual_rmsnorm_fwd, void, (const float* x, const float* res,    \
    float* sum, const float* g, bf16* y, float* rstd, int64_t rows, int64_t C, float eps), (x,   \
    res, sum, g, y, rstd, rows, C, eps))                                                         \
  X(rope_bwd, rope_bwd, void, (float* dx, int64_t rows, int T, int hd, const float* cos_t,       \
    const float* sin_t, int pos0), (dx, rows, T, hd, cos_t, sin_t, pos0))                        \
  X(attention_fwd, attention_fwd, void, (const float* q, const float* k, const float* v,         \
    float* o, float* lse, int B, int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd,             \
    int window), (q, k, v, o, lse, B, H, Hkv, Tq, Tk, Tk_cap, hd, window))                       \
  X(attention_bwd, attention_bwd, void, (const float* q, const float* k, const float* v,         \
    const float* o, const float* lse, const float* dout, float* dq, float* dk, float* dv, int B, \
    int H, int Hkv, int T, int hd, int window), (q, k, v, o, lse, dout, dq, dk, dv, B, H, Hkv,   \
    T, hd, window))                                                                              \
  X(merge_heads, merge_heads, void, (const float* y, float* x, int64_t ld, int B, int T, int nh, \
    int hd), (y, x, ld, B, T, nh, hd))                                                           \
  X(merge_heads_bf16, merge_heads, void, (const float* y, bf16* x, int64_t ld, int B, int T,     \
    int nh, int hd), (y, x, ld, B, T, nh, hd))                                                   \
  X(qkv_heads_fwd, qkv_heads_fwd, void, (const float* qkv, const float* ve, const int32_t* tok,  \
    int B, int T, int H, int Hkv, int hd, bool qk_norm, const float* qg, const float* kg,        \
    float eps, const float* cos_t, const float* sin_t, float* qraw, float* kraw, float* q_rstd,  \
    float* k_rstd, float* q, float* k, float* v), (qkv, ve, tok, B, T, H, Hkv, hd, qk_norm, qg,  \
    kg, eps, cos_t, sin_t, qraw, kraw, q_rstd, k_rstd, q, k, v))                                 \
  X(relu2_fwd, relu2_fwd, void, (const float* x, float* y, int64_t n), (x, y, n))                \
  X(relu2_bwd, relu2_bwd, void, (const float* x, const float* dy, float* dx, int64_t n), (x, dy, \
    dx, n))                                                                                      \
  X(gelu_fwd, gelu_fwd, void, (const float* x, float* y, int64_t n), (x, y, n))                  \
  X(gelu_bwd, gelu_bwd, void, (const float* x, const float* dy, float* dx, int64_t n), (x, dy,   \
    dx, n))                                                                                      \
  X(swiglu_fwd, swiglu_fwd, void, (const float* hg, float* y, int64_t N, int64_t Hd), (hg, y, N, \
    Hd))                                                                                         \
  X(swiglu_bwd, swiglu_bwd, void, (const float* hg, const float* dy, float* dhg, int64_t N,      \
    int64_t Hd), (hg, dy, dhg, N, Hd))                                                           \
  X(relu2_fwd_bf16, relu2_fwd, void, (const float* x, bf16* y, int64_t n), (x, y, n))            \
  X(relu2_bwd_bf16, relu2_bwd, void, (const float* x, const float* dy, bf16* dx, int64_t n), (x, \
    dy, dx, n))                                                                                  \
  X(gelu_fwd_bf16, gelu_fwd, void, (const float* x, bf16* y, int64_t n), (x, y, n))              \
  X(gelu_bwd_bf16, gelu_bwd, void, (const float* x, const float* dy, bf16* dx, int64_t n), (x,   \
    dy, dx, n))                                                                                  \
  X(swiglu_fwd_bf16, swiglu_fwd, void, (const float* hg, bf16* y, int64_t N, int64_t Hd), (hg,   \
    y, N, Hd))                                                                                   \
  X(swiglu_bwd_bf16, swiglu_bwd, void, (const float* hg, const float* dy, bf16* dhg, int64_t N,  \
    int64_t Hd), (hg, dy, dhg, N, Hd))                                                           \
  X(residual_bwd, residual_bwd, void, (const float* dout, float* da, float* db, int64_t n),      \
    (dout, da, db, n))                                                                           \
  X(softcap_xent, softcap_xent, double, (float* logits, const int32_t* targets, int64_t N,       \
    int V, int Vp, int64_t ld, float cap, float* loss, int32_t* argmax, bool want_grad,          \
    float grad_scale, bf16* grad_bf16), (logits, targets, N, V, Vp, ld, cap, loss, argmax,       \
    want_grad, grad_scale, grad_bf16))                                                           \
  X(sum_squares, sum_squares, double, (const float* x, int64_t n), (x, n))                       \
  X(adamw_update, adamw_update, void, (float* p, const float* grad, float* m, float* v,          \
    int64_t n, float gscale, float lr, float beta1, float beta2, float eps, float wd, int64_t t, \
    bool cautious), (p, grad, m, v, n, gscale, lr, beta1, beta2, eps, wd, t, cautious))

// Every kernel: one table field each.
#define CLM_CPU_KERNELS(X) CLM_CPU_BACKEND_KERNELS(X) CLM_CPU_OTHER_KERNELS(X)

// The parameters of qkv_heads_bwd<OutT>, for its two table fields.
#define CLM_QKV_HEADS_BWD_PARAMS(OutT)                                                            \
  (const float* dq, const float* dk, const float* dv, const float* qraw, const float* kraw,       \
   const float* q_rstd, const float* k_rstd, const float* qg, const float* kg, float* dqg,        \
   float* dkg, int B, int T, int H, int Hkv, int hd, bool qk_norm, const float* cos_t,            \
   const float* sin_t, OutT* dqkv)
#define CLM_QKV_HEADS_BWD_ARGS                                                                    \
  (dq, dk, dv, qraw, kraw, q_rstd, k_rstd, qg, kg, dqg, dkg, B, T, H, Hkv, hd, qk_norm, cos_t,   \
   sin_t, dqkv)

namespace clm {

struct CpuKernels {
  const char* isa;  // "generic", "avx2" or "avx512"
#define CLM_KERNEL_FIELD(field, fn, R, params, args) R(*field) params;
  CLM_CPU_KERNELS(CLM_KERNEL_FIELD)
#undef CLM_KERNEL_FIELD
  void(*qkv_heads_bwd_f32) CLM_QKV_HEADS_BWD_PARAMS(float);
  void(*qkv_heads_bwd_bf16) CLM_QKV_HEADS_BWD_PARAMS(bf16);
  // Attention with bf16 products (attention_bf16.cpp, ops.h): null unless the variant is avx512
  // and the CPU has AVX512_BF16.
  decltype(attention_fwd) attention_fwd_bf16;
  decltype(attention_bwd) attention_bwd_bf16;
};

// The table of the selected variant; selects one on first use (cpu_features.cpp).
const CpuKernels& cpu_kernels();

// Each compiled variant's table (kernel_table.cpp); `f` lets a variant pick among its own code
// paths (the AVX-512 one uses the AVX512_BF16 conversion instruction when the CPU has it).
namespace isa_generic { CpuKernels kernel_table(const CpuFeatures& f); }
namespace isa_avx2 { CpuKernels kernel_table(const CpuFeatures& f); }
namespace isa_avx512 { CpuKernels kernel_table(const CpuFeatures& f); }

}  // namespace clm
