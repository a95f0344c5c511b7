// The passes of the CPU softcap + cross-entropy kernel over rows of 8192 logits, timed one by one
// (AVX-512 variant of backend/cpu/vmath.h; -DCLM_ISA=1 for AVX2, 0 for generic), each in the kernel's form and in the earlier form kept
// here for comparison ("old": tanh as sign(x) (1 - 2/(e^{2|x|} + 1)) with a Taylor branch near 0,
// exp(s - cap) as a second clamped exp, exp rounded with rint and a float-to-int conversion).
// Passes: softcap + exp-sum, softcap alone, exp-sum alone, and for the gradient the old second
// exp pass over s against the kernel's weights pass (softcap + exp-sum storing e^{s-cap} q (1-q))
// plus its scaling pass. ROWS 16 keeps the rows in L2; 512
// (16 MB) reads them from L3/memory, as the kernel does for a micro-batch's logits. Best of 7
// repetitions, one thread, ns per logit.
//
//   g++ -O3 -std=c++20 -fopenmp -Isrc bench/micro/softcap_passes.cpp -o /tmp/softcap_passes
//   /tmp/softcap_passes 16; /tmp/softcap_passes 512
#ifndef CLM_ISA
#define CLM_ISA CLM_ISA_AVX512
#endif
#include <chrono>
#include <cstdio>
#include <vector>
#include <random>
#include <cmath>
#include <cstdlib>
#include "backend/cpu/vmath.h"
CLM_ISA_BEGIN
inline float old_vexp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  float kf = __builtin_rintf(x * 1.44269504088896341f);
  float r = x - kf * 0.693359375f;
  r = r - kf * -2.12194440e-4f;
  float p = 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t k = int32_t(kf);
  return p * __builtin_bit_cast(float, (k + 127) << 23);
}
inline float old_vtanh(float x) {
  float ax = x < 0 ? -x : x;
  float e = old_vexp(2.0f * (ax > 9.0f ? 9.0f : ax));
  float big = 1.0f - 2.0f / (e + 1.0f);
  float x2 = ax * ax;
  float small = ax * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  float t = ax < 0.0625f ? small : big;
  return x < 0 ? -t : t;
}
float old_pass1(float* z, int V, float cap) {
  const float inv = 1.0f / cap; float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) { const float sj = cap * old_vtanh(z[j] * inv); z[j] = sj; sum += old_vexp(sj - cap); }
  return sum;
}
float old_tanh_only(float* z, int V, float cap) {
  const float inv = 1.0f / cap;
#pragma omp simd
  for (int j = 0; j < V; ++j) z[j] = cap * old_vtanh(z[j] * inv);
  return 0;
}
float old_exp(const float* z, int V, float cap) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) sum += old_vexp(z[j] - cap);
  return sum;
}
float pass1(float* z, int V, float cap) {  // as softcap_xent
  const float inv = 1.0f / cap, m2cap = -2.0f * cap; float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) {
    const float m = vtanh_expm1(z[j] * inv);
    const float q = 1.0f / (m + 2.0f);
    z[j] = cap * (m * q);
    sum += vexp_in_range(m2cap * q);
  }
  return sum;
}
float pass1_weights(float* z, int V, float cap) {  // as softcap_xent with a gradient
  const float inv = 1.0f / cap, m2cap = -2.0f * cap; float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) {
    const float m = vtanh_expm1(z[j] * inv);
    const float q = 1.0f / (m + 2.0f);
    const float p = vexp_in_range(m2cap * q);
    z[j] = p * (q * (1.0f - q));
    sum += p;
  }
  const float scale = 0.37f / sum;
#pragma omp simd
  for (int j = 0; j < V; ++j) z[j] *= scale;
  return sum;
}
float old_grad(float* z, int V, float cap) {  // the gradient pass over s after old_pass1
  const float inv = 1.0f / cap, lse = cap + 1.0f;
#pragma omp simd
  for (int j = 0; j < V; ++j) {
    const float s = z[j], ds = old_vexp(s - lse) * 0.37f;
    z[j] = ds * (1.0f - (s * inv) * (s * inv));
  }
  return 0;
}
float tanh_only(float* z, int V, float cap) {
  const float inv = 1.0f / cap;
#pragma omp simd
  for (int j = 0; j < V; ++j) z[j] = cap * vtanh(z[j] * inv);
  return 0;
}
float exp_sum(const float* z, int V, float cap) {  // the uncapped exp-sum and the gradient's exp
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) sum += vexp_nonpositive(z[j] - cap);
  return sum;
}
CLM_ISA_END
int main(int argc, char** argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 512, V = 8192; std::vector<float> z(size_t(N) * V), z0(z.size());
  std::mt19937 r(1); std::normal_distribution<float> d(0, 3); for (auto& x : z0) x = d(r);
  auto time = [&](const char* name, auto f) { double best = 1e9; for (int rep = 0; rep < 7; ++rep) { z = z0; auto t0 = std::chrono::steady_clock::now(); float s = 0; for (int n = 0; n < N; ++n) s += f(z.data() + size_t(n) * V); double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); best = std::min(best, t); if (s == 12345) std::puts(""); } std::printf("%-16s %.2f ns/logit\n", name, best * 1e9 / (double(N) * V)); };
  using namespace clm::CLM_ISA_NS;
  time("old pass1", [&](float* p) { return old_pass1(p, V, 15.0f); });
  time("pass1", [&](float* p) { return pass1(p, V, 15.0f); });
  time("old pass1+grad", [&](float* p) { return old_pass1(p, V, 15.0f) + old_grad(p, V, 15.0f); });
  time("pass1 weights", [&](float* p) { return pass1_weights(p, V, 15.0f); });
  time("old tanh only", [&](float* p) { return old_tanh_only(p, V, 15.0f); });
  time("tanh only", [&](float* p) { return tanh_only(p, V, 15.0f); });
  time("old exp only", [&](float* p) { return old_exp(p, V, 15.0f); });
  time("exp only", [&](float* p) { return exp_sum(p, V, 15.0f); });
}
