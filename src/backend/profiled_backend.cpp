// The profiling decorator (profiled_backend.h): the cost formulas of the ops with shapes beyond
// an element count, and the scope that names each op by the innermost region. Bytes count each operand once at its storage width (matmul inputs at the precision's
// element size, everything else fp32 unless an output dtype says otherwise).
#include "backend/profiled_backend.h"

#include <algorithm>

namespace clm {

namespace op_cost {

static double esz(DType t) { return double(dtype_size(t)); }

Cost gemm(MatPrec prec, int64_t M, int64_t N, int64_t K, bool accumulate) {
  const double m = double(M), n = double(N), k = double(K);
  return {2.0 * m * n * k, esz(matmul_dtype(prec)) * (m * k + k * n) + (accumulate ? 8.0 : 4.0) * m * n};
}

Cost rmsnorm_fwd(int64_t rows, int64_t C, DType out_t) {
  const double e = double(rows) * double(C);
  return {4.0 * e, (8.0 + esz(out_t)) * e};
}

Cost rmsnorm_bwd(int64_t rows, int64_t C) {
  const double e = double(rows) * double(C);
  return {8.0 * e, 16.0 * e};
}

Cost qkv_heads_fwd(const HeadShape& s, int T) {
  const double N = double(s.B) * T, qw = double(s.H) * s.hd, kvw = double(s.Hkv) * s.hd;
  return {10.0 * N * (qw + kvw), 4.0 * N * (2.0 * (qw + 2.0 * kvw) + qw + kvw)};
}

Cost qkv_heads_bwd(const HeadShape& s, int T) {
  const double N = double(s.B) * T, qw = double(s.H) * s.hd, kvw = double(s.Hkv) * s.hd;
  return {12.0 * N * (qw + kvw), 4.0 * N * (3.0 * qw + 3.0 * kvw + qw + 2.0 * kvw)};
}

double attended_pairs(int Tq, int Tk, int window) {
  // f(n): keys seen by the queries at positions 0..n-1 together.
  auto f = [window](double n) {
    if (n <= 0) return 0.0;
    if (window <= 0 || window >= n) return n * (n + 1.0) / 2.0;
    const double W = window;
    return W * (W + 1.0) / 2.0 + (n - W) * W;
  };
  return f(Tk) - f(double(Tk) - Tq);
}

Cost attention_fwd(const HeadShape& s, int Tq, int Tk, int window) {
  const double qw = double(s.H) * s.hd, kvw = double(s.Hkv) * s.hd;
  return {4.0 * s.B * s.H * s.hd * attended_pairs(Tq, Tk, window),
          4.0 * s.B * (2.0 * Tq * qw + 2.0 * double(Tk) * kvw)};
}

Cost attention_bwd(const HeadShape& s, int T, int window) {
  const double N = double(s.B) * T, qw = double(s.H) * s.hd, kvw = double(s.Hkv) * s.hd;
  return {10.0 * s.B * s.H * s.hd * attended_pairs(T, T, window), 4.0 * N * (4.0 * qw + 4.0 * kvw)};
}

// Width of the MLP pre-activation: [up | gate] for SwiGLU.
static double pre_width(Activation a, int64_t Hd) { return a == Activation::SwiGLU ? 2.0 * Hd : double(Hd); }

Cost activation_fwd(Activation a, int64_t N, int64_t Hd, DType out_t) {
  const double n = double(N), hd = double(Hd);
  return {8.0 * n * hd, (4.0 * pre_width(a, Hd) + esz(out_t) * hd + 4.0 * hd) * n};
}

Cost activation_bwd(Activation a, int64_t N, int64_t Hd) {
  const double n = double(N), hd = double(Hd);
  return {12.0 * n * hd, (8.0 * pre_width(a, Hd) + 4.0 * hd) * n};
}

Cost newton_schulz(int64_t rows, int64_t cols, int steps, MatPrec prec) {
  // steps * (4 a^2 b + 2 a^3), a the short side: X X^T, A^2 and the product with X per step.
  const double a = double(std::min(rows, cols)), b = double(std::max(rows, cols));
  return {steps * (4.0 * a * a * b + 2.0 * a * a * a),
          esz(matmul_dtype(prec)) * steps * (3.0 * a * b + 3.0 * a * a) + 8.0 * a * b};
}

}  // namespace op_cost

namespace {

const char* region_name(const Profiler& p, const char* op) {
  return p.regions.empty() ? op : p.regions.back().first;
}
const char* region_phase(const Profiler& p) {
  return p.regions.empty() ? "other" : p.regions.back().second;
}

}  // namespace

ProfiledBackend::Scope::Scope(Profiler& p, const char* op, op_cost::Cost c)
    : ProfScope(&p, region_name(p, op), region_phase(p), c.flops, c.bytes, op) {}

ProfiledBackend::ProfiledBackend(Backend& inner, Profiler& prof) : be_(inner), prof_(&prof) { attach(prof); }

void ProfiledBackend::attach(Profiler& prof) {
  prof_ = &prof;
  if (!be_.host_visible()) {
    prof.wait = [](void* be) { static_cast<Backend*>(be)->synchronize(); };
    prof.wait_ctx = &be_;
  }
}

}  // namespace clm
