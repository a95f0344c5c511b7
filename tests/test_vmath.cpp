// backend/cpu/vmath.h against float64 over dense sweeps of float bit patterns (the generic variant,
// compiled here; the AVX2/AVX-512 variants run the same arithmetic, and tests/test_cpu_isa.cpp
// sweeps vtanh through softcap_fwd in each of them), plus the clamped and non-finite inputs.
#define CLM_ISA CLM_ISA_GENERIC
#include "backend/cpu/vmath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>

using namespace clm::isa_generic;

namespace {

struct Worst {
  double abs = 0, rel = 0;
  float abs_at = 0, rel_at = 0;
};

// Every `stride`-th float in [lo, hi] (lo < 0 < hi, or 0 <= lo): the worst absolute and relative
// error of f against ref.
Worst sweep(float lo, float hi, uint32_t stride, const std::function<float(float)>& f,
            const std::function<double(double)>& ref) {
  Worst w;
  auto visit = [&](float x) {
    if (x < lo || x > hi) return;
    const double r = ref(double(x)), e = std::abs(double(f(x)) - r);
    const double re = r != 0 ? e / std::abs(r) : e;
    if (!(e <= w.abs)) w.abs = e, w.abs_at = x;
    if (!(re <= w.rel)) w.rel = re, w.rel_at = x;
  };
  const float top = std::max(std::abs(lo), std::abs(hi));
  uint32_t end;
  std::memcpy(&end, &top, 4);
  for (uint64_t u = 0; u <= end; u += stride) {
    float x;
    const uint32_t b = uint32_t(u);
    std::memcpy(&x, &b, 4);
    visit(x);
    visit(-x);
  }
  return w;
}

}  // namespace

TEST(VMath, ExpWithinOneUlpOverTheNormalRange) {
  Worst w = sweep(-87.3f, 88.3f, 97, vexp, [](double x) { return std::exp(x); });
  EXPECT_LE(w.rel, 1.5e-7) << "at " << w.rel_at;
  Worst n = sweep(-87.3f, 0.0f, 97, vexp_nonpositive, [](double x) { return std::exp(x); });
  EXPECT_LE(n.rel, 1.5e-7) << "at " << n.rel_at;
}

TEST(VMath, Expm1IsRelativelyAccurateNearZero) {
  Worst w = sweep(-87.3f, 88.3f, 97, vexpm1_in_range, [](double x) { return std::expm1(x); });
  EXPECT_LE(w.rel, 2e-7) << "at " << w.rel_at;
  EXPECT_EQ(vexpm1_in_range(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(vexpm1_in_range(1e-20f), 1e-20f);
}

TEST(VMath, CoarseExpWithinThreeTenthsOfAMillionth) {
  // Measured: 2.5e-7 relative at worst, every 7th float (the cross-entropy's two exponentials per logit).
  Worst w = sweep(-87.3f, 88.3f, 97, vexp_coarse, [](double x) { return std::exp(x); });
  EXPECT_LE(w.rel, 3e-7) << "at " << w.rel_at;
  EXPECT_TRUE(std::isnan(vexp_coarse(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VMath, ClampKeepsTheRangeAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {-18.0f, -17.5f, -1e-30f, -0.0f, 0.0f, 3.25f, 18.0f}) EXPECT_EQ(vclamp(x, -18.0f, 18.0f), x) << x;
  for (float x : {18.5f, 1e30f, inf}) EXPECT_EQ(vclamp(x, -18.0f, 18.0f), 18.0f) << x;
  for (float x : {-18.5f, -1e30f, -inf}) EXPECT_EQ(vclamp(x, -18.0f, 18.0f), -18.0f) << x;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(vclamp(nan, -18.0f, 18.0f)));
  EXPECT_TRUE(std::isnan(vclamp(-nan, -18.0f, 18.0f)));
}

TEST(VMath, TanhAbsoluteAndRelativeError) {
  Worst w = sweep(-12.0f, 12.0f, 97, vtanh, [](double x) { return std::tanh(x); });
  EXPECT_LE(w.abs, 2e-7) << "at " << w.abs_at;
  EXPECT_LE(w.rel, 3e-7) << "at " << w.rel_at;
  EXPECT_EQ(vtanh(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(vtanh(1e-30f), 1e-30f);
  EXPECT_FLOAT_EQ(vtanh(-3e-5f), float(std::tanh(-3e-5)));
}

TEST(VMath, ClampsAndNonFiniteInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float big : {50.0f, 1e4f, inf}) {
    EXPECT_EQ(vtanh(big), 1.0f) << big;
    EXPECT_EQ(vtanh(-big), -1.0f) << big;
  }
  for (float n : {nan, -nan}) {  // the clamps work on the bits, where a NaN's sign matters
    EXPECT_TRUE(std::isnan(vtanh(n)));
    EXPECT_TRUE(std::isnan(vexp(n)));
    EXPECT_TRUE(std::isnan(vexp_nonpositive(n)));
  }
  for (float x : {-100.0f, -1e30f, -inf}) {  // e^-87.3: a positive normal float, as for -87.3
    EXPECT_EQ(vexp(x), vexp(-87.3f)) << x;
    EXPECT_EQ(vexp_nonpositive(x), vexp(-87.3f)) << x;
    EXPECT_TRUE(std::isnormal(vexp(x))) << x;
  }
  for (float x : {100.0f, 1e30f, inf}) {
    EXPECT_EQ(vexp(x), vexp(88.3f)) << x;
    EXPECT_TRUE(std::isfinite(vexp(x))) << x;
  }
}
