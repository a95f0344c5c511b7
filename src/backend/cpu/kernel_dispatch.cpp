// The public CPU kernel functions (ops.h, optim_kernels.h and matmul.h's array conversions): each
// forwards to the same function of the selected kernel variant, through its table (kernels.h).
// Compiled once, for the build's baseline instruction set.
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/optim_kernels.h"
#include "core/common.h"

namespace clm {

#define CLM_KERNEL_FORWARD(field, fn, R, params, args) \
  R fn params { return cpu_kernels().field args; }
CLM_CPU_KERNELS(CLM_KERNEL_FORWARD)
#undef CLM_KERNEL_FORWARD

bool attention_bf16_available() { return cpu_kernels().attention_fwd_bf16 != nullptr; }

// The table entry of a bf16 attention kernel, or an error naming what the running variant lacks.
template <typename Fn>
static Fn bf16_attention_kernel(Fn fn) {
  if (!fn)
    fail("bf16 attention needs the avx512 CPU kernels and AVX512_BF16 (running: {} kernels{})",
         cpu_kernels().isa, cpu_features().avx512bf16 ? "" : ", no AVX512_BF16");
  return fn;
}

void attention_fwd_bf16(const float* q, const float* k, const float* v, float* o, float* lse, int B,
                        int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window) {
  bf16_attention_kernel(cpu_kernels().attention_fwd_bf16)(q, k, v, o, lse, B, H, Hkv, Tq, Tk, Tk_cap,
                                                          hd, window);
}

void attention_bwd_bf16(const float* q, const float* k, const float* v, const float* o,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                        int H, int Hkv, int T, int hd, int window) {
  bf16_attention_kernel(cpu_kernels().attention_bwd_bf16)(q, k, v, o, lse, dout, dq, dk, dv, B, H,
                                                          Hkv, T, hd, window);
}

template <typename OutT>
void qkv_heads_bwd CLM_QKV_HEADS_BWD_PARAMS(OutT) {
  if constexpr (std::is_same_v<OutT, float>)
    cpu_kernels().qkv_heads_bwd_f32 CLM_QKV_HEADS_BWD_ARGS;
  else
    cpu_kernels().qkv_heads_bwd_bf16 CLM_QKV_HEADS_BWD_ARGS;
}
template void qkv_heads_bwd<float> CLM_QKV_HEADS_BWD_PARAMS(float);
template void qkv_heads_bwd<bf16> CLM_QKV_HEADS_BWD_PARAMS(bf16);

}  // namespace clm
