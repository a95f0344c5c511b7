// Element-wise optimizer kernels shared by the optimizer and its tests: a thread-count-independent
// sum of squares (for the global grad norm), the AdamW update and Muon's momentum/apply steps.
#pragma once
#include <cstdint>

#include "backend/cpu/op_kernels.h"

namespace clm {

// x[i]^2 summed in double over fixed 16K-element chunks added in order, the same bits whatever
// the number of threads, so grad clipping cannot break run-to-run determinism (the kernel of the
// sum_squares_many op, one array at a time).
double sum_squares(const float* x, int64_t n);

// grad_clip (op_kernels.h, GradClipArgs): the sums added in order on the calling thread.

// One AdamW step on n elements (PyTorch semantics, decoupled weight decay):
//   g = grad*gscale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   p *= 1 - lr*wd;  p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)
// cautious: the decay only where m * p > 0 (the update already moves p towards zero).
void adamw_update(float* p, const float* grad, float* m, float* v, int64_t n, float gscale, float lr, float beta1,
                  float beta2, float eps, float wd, int64_t t, bool cautious);

// The adamw_update op's step-dependent scalars (gscale, lr, wd, t) are read from its device
// pointers by the CPU backend, which skips the call when the clip's finite flag is 0.

// The kernels below take the op's struct and read its GradClip and GroupStep (host memory on the
// CPU) themselves; each does nothing when clip->finite is 0.
// muon_momentum (op_kernels.h, MuonMomentumArgs): buf = mu*buf + g*gscale;
// u = nesterov ? g*gscale + mu*buf : buf.
// muon_apply (MuonApplyArgs): p = p*(1 - lr*wd) - lr*scale*o; cautious: the decay only where
// o * p > 0.
// normuon_scale (NormuonScaleArgs): v[r] = b2 v[r] + (1-b2) mean_c o[r,c]^2 (row sums in double);
// o[r,:] *= f / (sqrt(v[r]) + eps) with f = sqrt(sum_r ss_r / sum_r ss_r / (sqrt(v[r]) + eps)^2),
// ss_r the row's sum of squares before, so the Frobenius norm is unchanged.

}  // namespace clm
