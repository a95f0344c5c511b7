// Newton-Schulz orthogonalisation for Muon: maps a matrix G = U S V^T to approximately U V^T with
// the iteration X <- a X + (b A + c A^2) X, A = X X^T, one (a, b, c) per step of an NsSchedule
// (backend.h), after normalising X by its Frobenius norm. Works on the short side (A is min(r,c)^2) and runs its
// matmuls through oneDNN, in bf16 with fp32 accumulation by default.
#pragma once
#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace clm {

struct NewtonSchulzImpl;
struct NewtonSchulz {
  NewtonSchulz();
  ~NewtonSchulz();
  NewtonSchulz(NewtonSchulz&&) noexcept;
  NewtonSchulz& operator=(NewtonSchulz&&) noexcept;
  // out (rows x cols, row-major) = orthogonalised G. `out` may alias `G`. bf16: matmul inputs rounded
  // to bf16 (the iteration's fp32 state is kept); false: fp32 throughout. Small matrices (min side^2 x
  // max side <= 128*128*256) always take a plain fp32 loop path: oneDNN's per-call overhead dominates.
  void run(const float* G, float* out, int64_t rows, int64_t cols, const NsSchedule& sched, bool bf16);
  // FLOPs of one run (for the profiler): steps * (4 a^2 b + 2 a^3), a = short side, b = long side.
  static double flops(int64_t rows, int64_t cols, int steps);
  std::unique_ptr<NewtonSchulzImpl> impl;
};

}  // namespace clm
