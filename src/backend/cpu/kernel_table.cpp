// One variant's kernel table (kernels.h): the addresses of the functions that ops.cpp,
// attention.cpp, optim_kernels.cpp and convert.cpp define in this variant's namespace. A kernel
// variant source (kernel_isa.h), compiled once per instruction-set level.
#include "backend/cpu/kernel_isa.h"
#include "backend/cpu/kernels.h"

CLM_ISA_BEGIN

#define CLM_KERNEL_DECLARE(field, fn, R, params, args) R fn params;
CLM_CPU_KERNELS(CLM_KERNEL_DECLARE)
#undef CLM_KERNEL_DECLARE
template <typename OutT>
void qkv_heads_bwd CLM_QKV_HEADS_BWD_PARAMS(OutT);
#if CLM_ISA == CLM_ISA_AVX512
void f32_to_bf16_avx512bf16(const float* x, bf16* y, int64_t n);
void attention_fwd_bf16(const float* q, const float* k, const float* v, float* o, float* lse, int B,
                        int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window);
void attention_bwd_bf16(const float* q, const float* k, const float* v, const float* o,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                        int H, int Hkv, int T, int hd, int window);
#endif

CpuKernels kernel_table(const CpuFeatures& f) {
  CpuKernels k{};
#if CLM_ISA == CLM_ISA_AVX512
  k.isa = "avx512";
#elif CLM_ISA == CLM_ISA_AVX2
  k.isa = "avx2";
#else
  k.isa = "generic";
#endif
#define CLM_KERNEL_ADDRESS(field, fn, R, params, args) k.field = &fn;
  CLM_CPU_KERNELS(CLM_KERNEL_ADDRESS)
#undef CLM_KERNEL_ADDRESS
  k.qkv_heads_bwd_f32 = &qkv_heads_bwd<float>;
  k.qkv_heads_bwd_bf16 = &qkv_heads_bwd<bf16>;
#if CLM_ISA == CLM_ISA_AVX512
  if (f.avx512bf16) {
    k.f32_to_bf16 = &f32_to_bf16_avx512bf16;
    k.attention_fwd_bf16 = &attention_fwd_bf16;
    k.attention_bwd_bf16 = &attention_bwd_bf16;
  }
#endif
  return k;
}

CLM_ISA_END
