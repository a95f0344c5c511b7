// Element-wise optimizer kernels (see optim_kernels.h). Each is one pass over memory: on this
// machine (~33 GB/s) the optimizer's element-wise work is bandwidth-bound, so the loops are fused
// and simd. A kernel variant source (kernel_isa.h): compiled once per instruction-set level.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernel_isa.h"
#include "backend/cpu/optim_kernels.h"

CLM_ISA_BEGIN

// Below this many elements a loop runs on the calling thread: waking the team costs more than the
// work (and, on a loaded machine, a descheduled thread can stall a barrier for a whole time slice).
constexpr int64_t kParallelMin = 1 << 16;

double sum_squares(const float* x, int64_t n) {
  constexpr int64_t kChunk = 16384;
  // Within a chunk, kLanes running sums in a fixed interleaving, added in lane order at the end:
  // the vectoriser maps them onto registers of any width without reordering anything, so every
  // kernel variant gets the same bits (x*x is exact in double, so fused multiply-adds change
  // nothing either).
  constexpr int kLanes = 16;
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(size_t(nchunks), 0.0);
#pragma omp parallel for schedule(static) if (nchunks > 4)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
    double lane[kLanes] = {};
    int64_t i = lo;
    for (; i + kLanes <= hi; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
    double s = 0;
    for (int j = 0; j < kLanes; ++j) s += lane[j];
    for (; i < hi; ++i) s += double(x[i]) * double(x[i]);
    part[size_t(c)] = s;
  }
  double total = 0;
  for (double s : part) total += s;
  return total;
}

void grad_clip(const GradClipArgs& a) {
  double ss = 0;
  for (int i = 0; i < a.count; ++i) ss += a.part[i];
  const float norm = float(std::sqrt(ss));
  bool finite = std::isfinite(norm);
  for (int i = 0; i < a.n_checks; ++i) finite = finite && std::isfinite(a.checks[i]);
  a.out->norm = norm;
  a.out->gscale = a.max_norm > 0 && norm > a.max_norm ? a.max_norm / (norm + 1e-6f) : 1.0f;
  a.out->finite = finite ? 1 : 0;
}

void adamw_update(float* p, const float* grad, float* m, float* v, int64_t n, float gscale, float lr, float beta1,
                  float beta2, float eps, float wd, int64_t t, bool cautious) {
  const float bc1 = 1.0f - float(std::pow(double(beta1), double(t)));
  const float bc2 = 1.0f - float(std::pow(double(beta2), double(t)));
  const float step = lr / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2), decay = 1.0f - lr * wd;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gscale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i];
    // The update subtracted is step * mi / (...), of mi's sign.
    const float d = cautious && !(mi * pi > 0.0f) ? 1.0f : decay;
    p[i] = pi * d - step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

void muon_momentum(const MuonMomentumArgs& a) {
  if (!a.clip->finite) return;
  const float* grad = a.grad;
  float *buf = a.buf, *u = a.u;
  const int64_t n = a.n;
  const float gscale = a.clip->gscale, mu = a.step->mu;
  const bool nesterov = a.nesterov;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gscale;
    const float b = mu * buf[i] + g;
    buf[i] = b;
    u[i] = nesterov ? g + mu * b : b;
  }
}

void muon_apply(const MuonApplyArgs& a) {
  if (!a.clip->finite) return;
  float* p = a.p;
  const float* o = a.o;
  const int64_t n = a.n;
  const bool cautious = a.cautious;
  const float lr = a.step->lr, decay = 1.0f - lr * a.step->wd, step = lr * a.scale;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i], d = cautious && !(o[i] * pi > 0.0f) ? 1.0f : decay;
    p[i] = pi * d - step * o[i];
  }
}

void normuon_scale(const NormuonScaleArgs& a) {
  if (!a.clip->finite) return;
  float *o = a.o, *v = a.v;
  const int64_t rows = a.rows, cols = a.cols;
  const float beta2 = a.beta2, eps = a.eps;
  std::vector<double> ss(size_t(std::max<int64_t>(rows, 0)));
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = o + r * cols;
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += double(x[c]) * double(x[c]);
    ss[size_t(r)] = s;
    v[r] = beta2 * v[r] + (1.0f - beta2) * float(s / double(cols));
  }
  // The norm before and after the row division, from the row sums alone, in row order.
  double before = 0, after = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double d = double(std::sqrt(v[r]) + eps);
    before += ss[size_t(r)];
    after += ss[size_t(r)] / (d * d);
  }
  const double f = after > 0 ? std::sqrt(before / after) : 1.0;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float k = float(f / double(std::sqrt(v[r]) + eps));
    float* x = o + r * cols;
    for (int64_t c = 0; c < cols; ++c) x[c] *= k;
  }
}

CLM_ISA_END
