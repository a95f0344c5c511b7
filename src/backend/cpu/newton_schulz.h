// Newton-Schulz orthogonalisation for Muon: maps a matrix G = U S V^T to approximately U V^T with
// the iteration X <- a X + (b A + c A^2) X, A = X X^T, one (a, b, c) per step of an NsSchedule
// (backend.h), after normalising X by its Frobenius norm. Works on the short side (A is min(r,c)^2) and runs its
// matmuls through oneDNN, in bf16 with fp32 accumulation by default.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace clm {

struct NewtonSchulzImpl;
struct NewtonSchulzWorkers;
struct NewtonSchulz {
  NewtonSchulz();
  ~NewtonSchulz();
  NewtonSchulz(NewtonSchulz&&) noexcept;
  NewtonSchulz& operator=(NewtonSchulz&&) noexcept;
  // out (rows x cols, row-major) = orthogonalised G. `out` may alias `G`. bf16: matmul inputs rounded
  // to bf16 (the iteration's fp32 state is kept); false: fp32 throughout. Small matrices (min side^2 x
  // max side <= 128*128*256) always take a plain fp32 loop path: oneDNN's per-call overhead dominates.
  void run(const float* G, float* out, int64_t rows, int64_t cols, const NsSchedule& sched, bool bf16);
  // run() on each of `count` matrices, each result the one run() gives it alone when the same
  // oneDNN kernels are picked for one thread as for all (tests/test_backend_ops.cpp checks the
  // tolerance). Matrices below the threaded() size are dealt whole to the OpenMP threads by cost
  // (deal()), each thread orthogonalising its own single-threaded; the others run one at a time
  // with every thread. Called from inside a parallel region, everything runs on the calling thread.
  void run_many(const float* const* G, float* const* out, const int64_t* rows, const int64_t* cols, int count,
                const NsSchedule& sched, bool bf16);
  // FLOPs of one run (for the profiler): steps * (4 a^2 b + 2 a^3), a = short side, b = long side.
  static double flops(int64_t rows, int64_t cols, int steps);
  // Whether run_many runs this shape alone on every thread rather than on one thread of many:
  // from threaded_from multiply-adds per X X^T (a^2 b), where its own matmuls split well over
  // threads (bench ns --threads 1 against 2: bench/RESULTS.md).
  bool threaded(int64_t rows, int64_t cols) const;
  int64_t threaded_from = int64_t(768) * 768 * 3072;
  // Items of `cost` dealt to `nthr` threads, the largest first, each to the thread with the least
  // cost so far (ties to the lowest thread); per thread, its items in the order it runs them.
  static std::vector<std::vector<int>> deal(const std::vector<double>& cost, int nthr);
  std::unique_ptr<NewtonSchulzImpl> impl;
  std::unique_ptr<NewtonSchulzWorkers> workers;  // run_many's per-thread state

 private:
  static void run_on(NewtonSchulzImpl& s, const float* G, float* out, int64_t rows, int64_t cols,
                     const NsSchedule& sched, bool bf16);
};

}  // namespace clm
