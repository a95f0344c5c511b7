// The profiling decorator (profiled_backend.h): the cost formula of every op, and the scope that
// names each op by the innermost region. Bytes count each operand once at its storage width
// (matmul inputs at the precision's element size, everything else fp32 unless an output dtype says
// otherwise).
#include "backend/profiled_backend.h"

#include <algorithm>

namespace clm {

namespace op_cost {

static double esz(DType t) { return double(dtype_size(t)); }

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

Cost newton_schulz(int64_t rows, int64_t cols, int steps, MatPrec prec) {
  // steps * (4 a^2 b + 2 a^3), a the short side: X X^T, A^2 and the product with X per step.
  const double a = double(std::min(rows, cols)), b = double(std::max(rows, cols));
  return {steps * (4.0 * a * a * b + 2.0 * a * a * a),
          esz(matmul_dtype(prec)) * steps * (3.0 * a * b + 3.0 * a * a) + 8.0 * a * b};
}

// ---- one formula per op (op_list.h), in its order ----

Cost gemm(const GemmArgs& g) {
  const double m = double(g.M), n = double(g.N), k = double(g.K);
  return {2.0 * m * n * k, esz(matmul_dtype(g.prec)) * (m * k + k * n) + (g.accumulate ? 8.0 : 4.0) * m * n};
}
Cost f32_to_bf16(const float*, bf16*, int64_t n) { return per_elem(double(n), 0, 6); }
Cost bf16_to_f32(const bf16*, float*, int64_t n) { return per_elem(double(n), 0, 6); }
Cost embedding_fwd(const int32_t*, const float*, float*, int64_t N, int64_t C) {
  return per_elem(double(N) * double(C), 0, 8);
}
Cost embedding_bwd(const int32_t*, const float*, float*, int64_t N, int64_t C) {
  return per_elem(double(N) * double(C), 1, 12);
}
// Two table rows read and one row written per position, the gate's k products and the mix.
Cost embed_smear_fwd(const EmbedSmearArgs& a) {
  const double e = double(a.N) * double(a.C);
  return {2.0 * e + 2.0 * double(a.N) * a.k, 12.0 * e};
}
// The dot with the previous row, then both rows' scatter (read-modify-write).
Cost embed_smear_bwd(const EmbedSmearBwdArgs& a) {
  const double e = double(a.N) * double(a.C);
  return {6.0 * e + 4.0 * double(a.N) * a.k, 32.0 * e};
}
// The fused residual add reads one more row and writes the sum.
Cost rmsnorm_fwd(const RmsnormFwdArgs& a) {
  const double e = double(a.rows) * double(a.C), add = a.residual ? 1.0 : 0.0;
  return {(4.0 + add) * e, (8.0 + 8.0 * add + esz(a.out_t)) * e};
}
Cost rmsnorm_bwd(const RmsnormBwdArgs& a) {
  const double e = double(a.rows) * double(a.C);
  return {8.0 * e, 16.0 * e};
}
Cost rope_tables(float*, float*, int T, int hd, float) { return per_elem(double(T) * hd, 0, 4); }
Cost rope_fwd(float*, int64_t rows, int, int hd, const float*, const float*, int) {
  return per_elem(double(rows) * hd, 3, 12);
}
// With a value embedding, one more row of kvw read per position and an add.
Cost qkv_heads_fwd(const QkvHeadsFwdArgs& a) {
  const HeadShape& s = a.shape;
  const double N = double(s.B) * a.T, qw = double(s.H) * s.hd, kvw = double(s.Hkv) * s.hd, ve = a.ve ? 1.0 : 0.0;
  return {10.0 * N * (qw + kvw) + ve * N * kvw, 4.0 * N * (2.0 * (qw + 2.0 * kvw) + qw + kvw + ve * kvw)};
}
Cost qkv_heads_bwd(const QkvHeadsBwdArgs& a) {
  const HeadShape& s = a.shape;
  const double N = double(s.B) * a.T, qw = double(s.H) * s.hd, kvw = double(s.Hkv) * s.hd;
  return {12.0 * N * (qw + kvw), 4.0 * N * (3.0 * qw + 3.0 * kvw + qw + 2.0 * kvw)};
}
Cost attention_fwd(const AttentionFwdArgs& a) { return attention_fwd(a.shape, a.Tq, a.Tk, a.window); }
Cost attention_bwd(const AttentionBwdArgs& a) {
  const HeadShape& s = a.shape;
  const double N = double(s.B) * a.T, qw = double(s.H) * s.hd, kvw = double(s.Hkv) * s.hd;
  return {10.0 * s.B * s.H * s.hd * attended_pairs(a.T, a.T, a.window), 4.0 * N * (4.0 * qw + 4.0 * kvw)};
}
Cost split_heads(const SplitHeadsArgs& a) { return per_elem(double(a.B) * a.T * a.nh * a.hd, 0, 8); }
Cost merge_heads(const MergeHeadsArgs& a) {
  return per_elem(double(a.B) * a.T * a.nh * a.hd, 0, 4.0 + esz(a.out_t));
}

// Width of the MLP pre-activation: [up | gate] for SwiGLU.
static double pre_width(Activation a, int64_t Hd) { return a == Activation::SwiGLU ? 2.0 * Hd : double(Hd); }

Cost activation_fwd(Activation act, const float*, void*, DType out_t, int64_t N, int64_t Hd) {
  const double n = double(N), hd = double(Hd);
  return {8.0 * n * hd, (4.0 * pre_width(act, Hd) + esz(out_t) * hd + 4.0 * hd) * n};
}
Cost activation_bwd(Activation act, const float*, const float*, void*, DType, int64_t N, int64_t Hd) {
  const double n = double(N), hd = double(Hd);
  return {12.0 * n * hd, (8.0 * pre_width(act, Hd) + 4.0 * hd) * n};
}
Cost residual_fwd(const float*, const float*, float*, int64_t n) { return per_elem(double(n), 1, 12); }
Cost mix2_fwd(const float*, const float*, const float*, float*, int64_t n) {
  return per_elem(double(n), 3, 12);
}
Cost mix2_bwd(const Mix2BwdArgs& a) { return per_elem(double(a.n), 6, 24); }
Cost scale(float*, float, int64_t n) { return per_elem(double(n), 1, 8); }
Cost axpy(float*, float, const float*, int64_t n) { return per_elem(double(n), 2, 12); }
Cost softcap_xent(const SoftcapXentArgs& a) {
  return {30.0 * double(a.N) * a.V, (a.want_grad && a.grad_bf16 ? 10.0 : 8.0) * double(a.N) * a.Vp};
}
Cost softcap_fwd(float*, int64_t n, float) { return per_elem(double(n), 5, 8); }
Cost sum_squares_many(const float* const*, const int64_t* ns, int count, double*) {
  double n = 0;
  for (int i = 0; i < count; ++i) n += double(ns[i]);
  return per_elem(n, 2, 4);
}
// One thread adding the per-parameter sums: count additions, the doubles read, one GradClip written.
Cost grad_clip(const GradClipArgs& a) {
  const double n = double(a.count) + double(a.n_checks);
  return {double(a.count), n > 0 ? 8.0 * n + double(sizeof(GradClip)) : 0.0};
}
Cost adamw_update(const AdamWArgs& a) { return per_elem(double(a.n), 12, 28); }
Cost muon_momentum(const MuonMomentumArgs& a) { return per_elem(double(a.n), 4, 16); }
Cost muon_apply(const MuonApplyArgs& a) { return per_elem(double(a.n), 3, 12); }
Cost normuon_scale(const NormuonScaleArgs& a) { return per_elem(double(a.rows) * double(a.cols), 5, 12); }
Cost newton_schulz(const float*, float*, int64_t rows, int64_t cols, const NsSchedule& sched, MatPrec prec) {
  return newton_schulz(rows, cols, int(sched.steps.size()), prec);
}
Cost newton_schulz_many(const NewtonSchulzManyArgs& a) {
  Cost c{0, 0};
  for (int i = 0; i < a.count; ++i) {
    const Cost one = newton_schulz(a.rows[i], a.cols[i], int(a.sched->steps.size()), a.prec);
    c.flops += one.flops;
    c.bytes += one.bytes;
  }
  return c;
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
