// Worst error of backend/cpu/vmath.h's vtanh, vexp, vexpm1_in_range and vexp_coarse against float64 over every
// `step`-th float bit pattern of magnitude at least 2^-30 in the range (both signs), for the kernel
// variant chosen by CLM_ISA (0 generic, 1 AVX2, 2 AVX-512). step 1 visits ~6e8 floats per function.
//
//   g++ -O3 -std=gnu++20 -fopenmp -Isrc -DCLM_ISA=2 bench/micro/vmath_accuracy.cpp -o /tmp/vmath_acc
//   /tmp/vmath_acc 1
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "backend/cpu/vmath.h"
CLM_ISA_BEGIN
void run_tanh(const float* x, float* y, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] = vtanh(x[i]);
}
void run_exp(const float* x, float* y, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] = vexp(x[i]);
}
void run_expm1(const float* x, float* y, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] = vexpm1_in_range(x[i]);
}
void run_exp_coarse(const float* x, float* y, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] = vexp_coarse(x[i]);
}
CLM_ISA_END
using namespace clm::CLM_ISA_NS;
template <class F, class R>
void sweep(const char* name, float lo, float hi, int step, F f, R ref) {
  std::vector<float> xs, ys;
  for (int sgn = 0; sgn < 2; ++sgn) {
    float a = sgn ? -hi : 0x1p-30f, b = sgn ? (lo < 0 ? -0x1p-30f : 0) : hi;
    if (!sgn && lo >= 0) a = lo;
    if (sgn && lo >= 0) continue;
    uint32_t ua, ub; float aa = std::fabs(a), bb = std::fabs(b);
    std::memcpy(&ua, &aa, 4); std::memcpy(&ub, &bb, 4);
    if (ua > ub) std::swap(ua, ub);
    for (uint64_t u = ua; u <= ub; u += step) { float v; uint32_t w = uint32_t(u); std::memcpy(&v, &w, 4); if (sgn) v = -v; if (v >= lo && v <= hi) xs.push_back(v); }
  }
  ys.resize(xs.size());
  f(xs.data(), ys.data(), int(xs.size()));
  double amax = 0, rmax = 0; float ax = 0, rx = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    double r = ref(double(xs[i])), e = std::fabs(ys[i] - r), re = e / std::fabs(r);
    if (!(e <= amax)) amax = e, ax = xs[i];
    if (!(re <= rmax)) rmax = re, rx = xs[i];
  }
  std::printf("%-8s [%g, %g] %zu points: max abs %.3g (x=%g), max rel %.3g (x=%g)\n", name, lo, hi, xs.size(), amax, ax, rmax, rx);
}
int main(int argc, char** argv) {
  int step = argc > 1 ? atoi(argv[1]) : 1;
  sweep("tanh", -12, 12, step, run_tanh, [](double x) { return std::tanh(x); });
  sweep("exp", -87.3f, 88.3f, step, run_exp, [](double x) { return std::exp(x); });
  sweep("expm1", -87.3f, 88.3f, step, run_expm1, [](double x) { return std::expm1(x); });
  sweep("exp_coarse", -87.3f, 88.3f, step, run_exp_coarse, [](double x) { return std::exp(x); });
}
