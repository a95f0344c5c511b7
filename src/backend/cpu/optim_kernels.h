// Element-wise optimizer kernels shared by the optimizer and its tests: a thread-count-independent
// sum of squares (for the global grad norm), the AdamW update and Muon's momentum/apply steps.
#pragma once
#include <cstdint>

namespace clm {

// Sum of x[i]^2 in double, over fixed 16K-element chunks added in order: the same bits whatever the
// number of threads, so grad clipping cannot break run-to-run determinism.
double sum_squares(const float* x, int64_t n);

// One AdamW step on n elements (PyTorch semantics, decoupled weight decay):
//   g = grad*gscale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   p *= 1 - lr*wd;  p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)
// cautious: the decay only where m * p > 0 (the update already moves p towards zero).
void adamw_update(float* p, const float* grad, float* m, float* v, int64_t n, float gscale, float lr, float beta1,
                  float beta2, float eps, float wd, int64_t t, bool cautious);

// Muon momentum: buf = mu*buf + g*gscale; u = nesterov ? g*gscale + mu*buf : buf.
void muon_momentum(const float* grad, float* buf, float* u, int64_t n, float gscale, float mu, bool nesterov);
// p = p*(1 - lr*wd) - lr*scale*o; cautious: the decay only where o * p > 0.
void muon_apply(float* p, const float* o, int64_t n, float lr, float scale, float wd, bool cautious);
// NorMuon (Backend::normuon_scale): v[r] = b2 v[r] + (1-b2) mean_c o[r,c]^2 (row sums in double);
// o[r,:] *= f / (sqrt(v[r]) + eps) with f = sqrt(sum_r ss_r / sum_r ss_r / (sqrt(v[r]) + eps)^2),
// ss_r the row's sum of squares before, so the Frobenius norm is unchanged.
void normuon_scale(float* o, float* v, int64_t rows, int64_t cols, float beta2, float eps);

}  // namespace clm
