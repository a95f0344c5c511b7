// The passes of the CPU softcap + cross-entropy kernel over rows of 8192 logits, timed one by one
// (AVX-512 variant of backend/cpu/vmath.h): the softcap + exp-sum pass, the softcap alone and the
// exp-sum alone. ROWS 16 keeps the rows in L2; 512 (16 MB) reads them from memory, as the kernel
// does for a micro-batch's logits. Best of 7 repetitions, one thread, ns per logit.
//
//   g++ -O3 -std=c++20 -fopenmp -Isrc bench/micro/softcap_passes.cpp -o /tmp/softcap_passes
//   /tmp/softcap_passes 16; /tmp/softcap_passes 512
#define CLM_ISA CLM_ISA_AVX512
#include <chrono>
#include <cstdio>
#include <vector>
#include <random>
#include <cmath>
#include <cstdlib>
#include "backend/cpu/vmath.h"
CLM_ISA_BEGIN
float pass1(float* z, int V, float cap) {
  const float inv = 1.0f / cap; float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) { const float sj = cap * vtanh(z[j] * inv); z[j] = sj; sum += vexp(sj - cap); }
  return sum;
}
float pass1_tanh_only(float* z, int V, float cap) {
  const float inv = 1.0f / cap;
#pragma omp simd
  for (int j = 0; j < V; ++j) z[j] = cap * vtanh(z[j] * inv);
  return 0;
}
float pass_exp(const float* z, int V, float cap) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) sum += vexp(z[j] - cap);
  return sum;
}
CLM_ISA_END
int main(int argc, char** argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 512, V = 8192; std::vector<float> z(size_t(N) * V), z0(z.size());
  std::mt19937 r(1); std::normal_distribution<float> d(0, 3); for (auto& x : z0) x = d(r);
  auto time = [&](const char* name, auto f) { double best = 1e9; for (int rep = 0; rep < 7; ++rep) { z = z0; auto t0 = std::chrono::steady_clock::now(); float s = 0; for (int n = 0; n < N; ++n) s += f(z.data() + size_t(n) * V); double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); best = std::min(best, t); if (s == 12345) std::puts(""); } std::printf("%-16s %.2f ns/logit\n", name, best * 1e9 / (double(N) * V)); };
  time("pass1", [&](float* p) { return clm::isa_avx512::pass1(p, V, 15.0f); });
  time("tanh only", [&](float* p) { return clm::isa_avx512::pass1_tanh_only(p, V, 15.0f); });
  time("exp only", [&](float* p) { return clm::isa_avx512::pass_exp(p, V, 15.0f); });
}
