// The whole CPU softcap + cross-entropy kernel (clm::softcap_xent, the variant picked at run time or
// forced with CLOCKLM_CPU_ISA) on N rows of 8192 logits with the gradient, as the LM head calls it
// with bf16 matmuls (arguments: N, repetitions, 1 = bf16 gradient / 0 = fp32 in place). Reports the
// best wall time and the best process CPU time of the repetitions: on a shared machine the CPU time
// is the steadier of the two. N 4096 is a `speedrun-10m` micro-batch (128 MB of logits, read from
// memory); N 16 keeps the rows in L2.
//
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/micro/softcap_xent_kernel.cpp build/libclocklm_lib.a \
//       -ldnnl -lfmt -o /tmp/softcap_xent_kernel
//   OMP_NUM_THREADS=1 /tmp/softcap_xent_kernel 4096 4 1
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <algorithm>
#include <omp.h>
#include <ctime>
static double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
#include "backend/cpu/ops.h"
#include "backend/cpu/cpu_features.h"
using namespace clm;
int main(int argc, char** argv) {
  int64_t N = argc > 1 ? atoi(argv[1]) : 4096;
  int V = 8192, Vp = 8192;
  int reps = argc > 2 ? atoi(argv[2]) : 7;
  bool bf = argc > 3 ? atoi(argv[3]) : 1;
  std::vector<float> z0(size_t(N) * Vp), z(z0.size());
  std::vector<bf16> gb(z0.size());
  std::vector<int32_t> tg(N);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 3);
  for (auto& x : z0) x = nd(rng);
  for (auto& t : tg) t = rng() % V;
  std::vector<float> loss(N);
  double best = 1e9, tot = 0, bestc = 1e9;
  for (int r = 0; r < reps; ++r) {
    std::copy(z0.begin(), z0.end(), z.begin());
    auto t0 = std::chrono::steady_clock::now();
    double c0 = cpu_now();
    tot = softcap_xent(z.data(), tg.data(), N, V, Vp, 15.0f, loss.data(), nullptr, true, 1.0f / N,
                       bf ? gb.data() : nullptr);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
    bestc = std::min(bestc, cpu_now() - c0);
  }
  printf("isa %s threads %d N %ld bf16 %d: wall best %.2f ms, cpu best %.2f ms = %.3f cpu-ns/logit, total %.9g\n",
         cpu_kernel_isa().c_str(), omp_get_max_threads(), (long)N, int(bf), best * 1e3, bestc * 1e3,
         bestc * 1e9 / (double(N) * V), tot);
}
