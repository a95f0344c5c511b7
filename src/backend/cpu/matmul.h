// Matrix multiplication for the CPU backend: oneDNN primitives (created once per shape and cached),
// bf16 inputs with fp32 accumulation by default, or plain fp32 for gradient checks. Also the
// fp32 <-> bf16 conversions every bf16 matmul input goes through.
#pragma once
#include <cstdint>

#include "backend/cpu/op_kernels.h"
#include "backend/dtype.h"
#include "backend/op_args.h"

namespace clm {

// f32_to_bf16 / bf16_to_f32 (op_kernels.h): round-to-nearest-even fp32 -> bf16 (NaN stays NaN)
// and back over arrays, parallel over n with OpenMP. The scalar forms and the MatPrec/bf16 types
// are in backend/dtype.h.

// C (=, or += when accumulate) A B as GemmArgs (backend/op_args.h) says, row strides included. A
// and B hold bf16 when prec==BF16 and fp32 when prec==F32; C is always fp32. Deterministic for a
// given thread count (oneDNN does not split K across threads racily).
void gemm(const GemmArgs& g);

// Best-of-`reps` seconds of one M x N x K gemm (B transposed, as a linear layer's) in bf16 and in
// fp32, timed alternately after an untimed run of each.
struct Bf16Timing {
  double bf16_seconds, fp32_seconds;
};
Bf16Timing time_bf16_vs_fp32(int64_t M, int64_t N, int64_t K, int reps);

// The bf16 matmul ceiling of this machine: GFLOP/s of a large square bf16 gemm (fp32 accumulate),
// best of `reps` timed runs after one warm-up. Used by `clocklm bench` for the "fraction of
// ceiling" column.
double measure_matmul_ceiling_gflops(int64_t n = 2048, int reps = 5);

// Best FLOP/s of an n x n x n oneDNN matmul (bf16 inputs or fp32, fp32 out) over repeated runs
// lasting at least `seconds` (3 at least); 0 where oneDNN cannot run it (bf16 on an old CPU).
// Uses the current OpenMP thread count (matmul_peak.cpp).
double measure_matmul_flops(int n, bool bf16, double seconds);

}  // namespace clm
