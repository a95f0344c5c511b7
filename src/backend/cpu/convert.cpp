// The array fp32 <-> bf16 conversions of matmul.h (a kernel variant source, see kernel_isa.h).
// Round to nearest even, NaN kept a (quiet) NaN: the same bits in every variant. The portable form
// is integer arithmetic that the compiler vectorises; on CPUs with AVX512_BF16 the avx512 variant
// uses the conversion instruction instead, which does the same rounding in one instruction (the
// conversion feeds every bf16 matmul and each Newton-Schulz iteration, often from cache, where the
// integer form is the slower one) but flushes denormal inputs to zero, so those few are redone
// exactly.
#include <cstdint>
#include <cstring>

#include "backend/cpu/kernel_isa.h"
#include "backend/cpu/matmul.h"

#if CLM_ISA == CLM_ISA_AVX512
#include <immintrin.h>
#endif

CLM_ISA_BEGIN

namespace {
// Below this many elements a conversion runs on the calling thread.
constexpr int64_t kParallelMin = 32768;

inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return bf16(((u & 0x7fffffffu) > 0x7f800000u) ? ((u >> 16) | 0x40) : r);
}
}  // namespace

void f32_to_bf16(const float* x, bf16* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

void bf16_to_f32(const bf16* x, float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = uint32_t(x[i]) << 16;
    std::memcpy(&y[i], &u, 4);
  }
}

#if CLM_ISA == CLM_ISA_AVX512
// Selected by kernel_table.cpp only when the CPU has AVX512_BF16.
#pragma GCC push_options
#pragma GCC target("avx512bf16")  // added to the variant's AVX-512 target
void f32_to_bf16_avx512bf16(const float* x, bf16* y, int64_t n) {
  const int64_t nv = n / 16;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t j = 0; j < nv; ++j) {
    __m512 v = _mm512_loadu_ps(x + j * 16);
    __m256bh h = _mm512_cvtneps_pbh(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + j * 16), reinterpret_cast<__m256i&>(h));
    // Denormal inputs (fpclass category 0x20) came out as zero; round them like the portable form.
    __mmask16 den = _mm512_fpclass_ps_mask(v, 0x20);
    while (den) {
      int lane = __builtin_ctz(den);
      y[j * 16 + lane] = to_bf16(x[j * 16 + lane]);
      den &= den - 1;
    }
  }
  for (int64_t i = nv * 16; i < n; ++i) y[i] = to_bf16(x[i]);
}
#pragma GCC pop_options
#endif

CLM_ISA_END
