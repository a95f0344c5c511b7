// Vectorisable float exp and tanh for the CPU kernels. std::exp/std::tanh are scalar library calls
// that stop GCC from vectorising a loop; these are branch-free (selects only), so the loops that
// use them become SIMD code of the kernel variant being compiled (they live in its namespace, see
// kernel_isa.h). Accuracy: vexp ~2 ulp over the normal range, vtanh ~1e-7 absolute.
#pragma once
#include <cstdint>

#include "backend/cpu/kernel_isa.h"

CLM_ISA_BEGIN

// e^x: x = k*ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial, 2^k by building the exponent.
inline float vexp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  float kf = __builtin_rintf(x * 1.44269504088896341f);
  float r = x - kf * 0.693359375f;    // ln2 split in two parts for an exact first reduction
  r = r - kf * -2.12194440e-4f;
  float p = 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t k = int32_t(kf);
  float scale = __builtin_bit_cast(float, (k + 127) << 23);
  return p * scale;
}

// tanh(x) = sign(x) * (1 - 2/(e^{2|x|} + 1)); for |x| < 0.0625 an odd Taylor polynomial avoids the
// cancellation in 1 - 2/(..).
inline float vtanh(float x) {
  float ax = x < 0 ? -x : x;
  float e = vexp(2.0f * (ax > 9.0f ? 9.0f : ax));
  float big = 1.0f - 2.0f / (e + 1.0f);
  float x2 = ax * ax;
  float small = ax * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  float t = ax < 0.0625f ? small : big;
  return x < 0 ? -t : t;
}

CLM_ISA_END
