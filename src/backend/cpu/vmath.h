// Vectorisable float exp, expm1 and tanh for the CPU kernels. std::exp/std::tanh are scalar library
// calls that stop GCC from vectorising a loop; these are branch-free, so the loops that use them
// become SIMD code of the kernel variant being compiled (they live in its namespace, see
// kernel_isa.h). NaN inputs give NaN. Accuracy against float64 over every float in range
// (tests/test_vmath.cpp and test_cpu_isa.cpp check sweeps): vexp within 9e-8 relative over
// [-87.3, 88.3], vexpm1 within 1.3e-7 relative, vtanh within 1.5e-7 absolute and 2e-7 relative,
// vexp_coarse within 3e-7 relative.
#pragma once
#include <cstdint>

#include "backend/cpu/kernel_isa.h"

CLM_ISA_BEGIN

// x = k*ln2 + r with |r| <= ln2/2: 2^k and e^r - 1 (the latter without the cancellation of
// computing e^r first). k is rounded by adding 1.5*2^23 + 127, which leaves k + 127 in the low bits
// of the sum, so shifting those bits into the exponent field gives 2^k without a float-to-int
// conversion. Valid for x in [-87.3, 88.3] (2^k normal); NaN propagates through e^r - 1.
struct ExpParts {
  float scale;  // 2^k
  float em1;    // e^r - 1
};
inline ExpParts vexp_parts(float x) {
  const float shifter = 12582912.0f + 127.0f;
  const float t = x * 1.44269504088896341f + shifter;
  const float kf = t - shifter;
  float r = x - kf * 0.693359375f;  // ln2 split in two parts for an exact first reduction
  r = r - kf * -2.12194440e-4f;
  // (e^r - 1 - r) / r^2 by its Taylor series to degree 5: the truncation error, below r^6/8!,
  // is ~2e-8 relative to e^r - 1 itself, which expm1 needs (e^r alone would tolerate degree 4).
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  return {__builtin_bit_cast(float, __builtin_bit_cast(int32_t, t) << 23), p * (r * r) + r};
}

// e^x for x in [-87.3, 88.3] (no clamping; callers that know their range save the selects).
inline float vexp_in_range(float x) {
  const ExpParts e = vexp_parts(x);
  return e.em1 * e.scale + e.scale;
}

// e^x for x <= 88.3, such as a log-probability: e^-87.3 (a normal float, ~1e-38) below -87.3.
// The clamp is an unsigned minimum on the bits (negative floats order by magnitude above all
// positive ones), which every variant vectorises (see vtanh_expm1).
inline float vexp_nonpositive(float x) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, x), lo = 0xC2AE999Au;  // -87.3f
  const float c = __builtin_bit_cast(float, bits < lo ? bits : lo);
  return vexp_in_range(x == x ? c : x);  // a NaN stays NaN
}

// x clamped to [lo, hi] (lo < 0 < hi) by two integer minima on the bits: a signed one bounds the
// positive floats, an unsigned one the negative ones (see vexp_nonpositive). A NaN stays NaN.
inline float vclamp(float x, float lo, float hi) {
  const int32_t bits = __builtin_bit_cast(int32_t, x), h = __builtin_bit_cast(int32_t, hi);
  const uint32_t below = uint32_t(bits < h ? bits : h), l = __builtin_bit_cast(uint32_t, lo);
  const float c = __builtin_bit_cast(float, below < l ? below : l);
  return x == x ? c : x;
}

// e^x for x in [-87.3, 88.3] to 3e-7 relative (vexp_in_range: 9e-8) in two operations fewer: the
// same exact two-part reduction, and e^r as a degree-5 polynomial interpolating it at the Chebyshev
// nodes of [-ln2/2, ln2/2] (2.2e-7 evaluated in float) instead of e^r - 1 to degree 7. For the
// cross-entropy, which spends two exponentials on each logit and whose tolerances are far wider.
inline float vexp_coarse(float x) {
  const float shifter = 12582912.0f + 127.0f;
  const float t = x * 1.44269504088896341f + shifter;
  const float kf = t - shifter;
  float r = x - kf * 0.693359375f;  // see vexp_parts
  r = r - kf * -2.12194440e-4f;
  float p = 8.369148709e-3f;
  p = p * r + 4.191750661e-2f;
  p = p * r + 1.666650474e-1f;
  p = p * r + 4.999887049e-1f;
  p = p * r + 1.0f;
  p = p * r + 1.000000119f;
  return p * __builtin_bit_cast(float, __builtin_bit_cast(int32_t, t) << 23);
}

// e^x, clamped to [e^-87.3, e^88.3] outside the range of normal floats.
inline float vexp(float x) { return vexp_in_range(vclamp(x, -87.3f, 88.3f)); }

// e^x - 1 for x in [-87.3, 88.3]: 2^k (e^r - 1) + (2^k - 1), exact to a few ulp near 0.
inline float vexpm1_in_range(float x) {
  const ExpParts e = vexp_parts(x);
  return e.em1 * e.scale + (e.scale - 1.0f);
}

// tanh(x) = m / (m + 2) with m = e^{2x} - 1: one expm1 and one division, accurate relative to
// tanh near 0 and without a sign split. |x| is clamped to 9, where tanh rounds to +-1 in float, by
// an integer minimum on the magnitude's bits: float selects against constants let GCC fold the
// clamped lanes' whole result into a constant on a separate branch, which the AVX2 and generic
// variants then fail to vectorise ("control flow in loop").
inline float vtanh_expm1(float x) {
  const int32_t bits = __builtin_bit_cast(int32_t, x);
  const int32_t mag = bits & 0x7fffffff, nine = 0x41100000;  // 9.0f
  const float c = __builtin_bit_cast(float, (mag < nine ? mag : nine) | (bits & INT32_MIN));
  return vexpm1_in_range(2.0f * (x == x ? c : x));  // a NaN stays NaN
}
inline float vtanh(float x) {
  const float m = vtanh_expm1(x);
  return m / (m + 2.0f);
}

// v where `keep`, else +0, as a bit mask rather than a select: with `keep ? f(x) : 0` GCC branches
// around f, and the AVX2 and generic variants then leave the loop scalar ("control flow in loop").
// A NaN or infinity in a masked lane becomes 0 too.
inline float keep_if(float v, bool keep) {
  const uint32_t mask = 0u - uint32_t(keep);
  return __builtin_bit_cast(float, __builtin_bit_cast(uint32_t, v) & mask);
}

CLM_ISA_END
