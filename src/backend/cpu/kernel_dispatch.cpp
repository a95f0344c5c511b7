// The public CPU kernel functions (ops.h, optim_kernels.h and matmul.h's array conversions): each
// forwards to the same function of the selected kernel variant, through its table (kernels.h).
// Compiled once, for the build's baseline instruction set.
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/optim_kernels.h"

namespace clm {

#define CLM_KERNEL_FORWARD(field, fn, R, params, args) \
  R fn params { return cpu_kernels().field args; }
CLM_CPU_KERNELS(CLM_KERNEL_FORWARD)
#undef CLM_KERNEL_FORWARD

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
