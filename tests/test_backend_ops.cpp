// Layer-level tests: every op's forward against a float64 reference, and its backward against
// central finite differences of that float64 reference, on odd shapes (not multiples of any tile).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/common.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"

using namespace clm;
using VecD = std::vector<double>;
using VecF = std::vector<float>;

namespace {

VecF randn(size_t n, uint64_t seed, float s = 1.0f) {
  Rng r(seed);
  VecF v(n);
  for (auto& x : v) x = s * r.normal();
  return v;
}
VecD to_d(const VecF& v) { return VecD(v.begin(), v.end()); }

// Loss = sum(out * R): the gradient of a op's output is R. FD of the float64 reference at
// `samples` coordinates of input `x` (all when samples <= 0) vs the op's analytic gradient.
void check_grad(const std::function<double(const VecD&)>& loss, const VecF& x, const VecF& grad,
                double tol, int samples = -1, const char* what = "") {
  VecD xd = to_d(x);
  Rng pick(99);
  size_t n = x.size();
  int m = samples <= 0 ? int(n) : samples;
  double max_err = 0, max_g = 0;
  for (int s = 0; s < m; ++s) {
    size_t i = samples <= 0 ? size_t(s) : size_t(pick.next() % n);
    double h = 1e-5 * std::max(1.0, std::abs(xd[i]));
    double old = xd[i];
    xd[i] = old + h;
    double lp = loss(xd);
    xd[i] = old - h;
    double lm = loss(xd);
    xd[i] = old;
    double fd = (lp - lm) / (2 * h);
    max_err = std::max(max_err, std::abs(fd - grad[i]));
    max_g = std::max(max_g, std::abs(fd));
  }
  EXPECT_LT(max_err, tol * std::max(1.0, max_g)) << what << " max |fd-analytic| " << max_err
                                                  << " max |g| " << max_g;
}

double dot(const VecD& a, const VecF& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST(Ops, Bf16RoundTrip) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  VecF x = randn(1001, 1);
  std::vector<bf16> y(x.size());
  f32_to_bf16(x.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], f32_to_bf16(x[i]));
    EXPECT_NEAR(bf16_to_f32(y[i]), x[i], std::abs(x[i]) / 256.0 + 1e-30);
  }
}

static void gemm_case(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K, bool acc) {
  VecF a = randn(M * K, 11 + M), b = randn(K * N, 12 + N), c = randn(M * N, 13);
  VecF c0 = c;
  std::vector<bf16> ab(a.size()), bb(b.size());
  if (prec == MatPrec::BF16) {  // the reference uses the same bf16-rounded inputs
    f32_to_bf16(a.data(), ab.data(), a.size());
    f32_to_bf16(b.data(), bb.data(), b.size());
    bf16_to_f32(ab.data(), a.data(), a.size());
    bf16_to_f32(bb.data(), b.data(), b.size());
  }
  const void* A = prec == MatPrec::BF16 ? (const void*)ab.data() : (const void*)a.data();
  const void* B = prec == MatPrec::BF16 ? (const void*)bb.data() : (const void*)b.data();
  gemm(prec, ta, tb, M, N, K, A, B, c.data(), acc);
  double max_err = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = acc ? c0[i * N + j] : 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? a[k * M + i] : a[i * K + k]) * double(tb ? b[j * K + k] : b[k * N + j]);
      max_err = std::max(max_err, std::abs(s - c[i * N + j]));
    }
  // fp32 accumulation over K terms of size ~1: error ~ K * 2^-24 * sqrt(K)
  EXPECT_LT(max_err, 1e-5 * K) << "M" << M << " N" << N << " K" << K << " ta" << ta << " tb" << tb;
}

TEST(Ops, GemmAgainstFloat64) {
  for (MatPrec p : {MatPrec::F32, MatPrec::BF16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        gemm_case(p, ta, tb, 37, 53, 29, false);
        gemm_case(p, ta, tb, 5, 70, 131, true);
      }
}

TEST(Ops, Bf16LinearAgainstFloat64Unrounded) {
  // bf16 inputs lose ~8 mantissa bits: relative error of a K-term dot ~ 2^-8 / sqrt(K)-ish.
  int64_t N = 33, in = 96, out = 65;
  VecF x = randn(N * in, 3), W = randn(out * in, 4, 0.1f), y(N * out);
  std::vector<bf16> xb(x.size()), Wb(W.size());
  f32_to_bf16(x.data(), xb.data(), x.size());
  f32_to_bf16(W.data(), Wb.data(), W.size());
  linear_fwd(MatPrec::BF16, xb.data(), Wb.data(), y.data(), N, in, out);
  double err = 0, norm = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += double(x[n * in + i]) * W[o * in + i];
      err += (s - y[n * out + o]) * (s - y[n * out + o]);
      norm += s * s;
    }
  EXPECT_LT(std::sqrt(err / norm), 1e-2);
  EXPECT_GT(std::sqrt(err / norm), 0.0);  // it really ran in bf16
}

TEST(Ops, LinearBackwardFloat32) {
  int64_t N = 9, in = 13, out = 7;
  VecF x = randn(N * in, 5), W = randn(out * in, 6), R = randn(N * out, 7);
  VecF dx(N * in), dW(out * in, 0.0f);
  linear_bwd_input(MatPrec::F32, R.data(), W.data(), dx.data(), N, in, out, false);
  linear_bwd_weight(MatPrec::F32, R.data(), x.data(), dW.data(), N, in, out);
  auto ref = [&](const VecD& xx, const VecD& ww) {
    double L = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i) s += xx[n * in + i] * ww[o * in + i];
        L += s * R[n * out + o];
      }
    return L;
  };
  check_grad([&](const VecD& xx) { return ref(xx, to_d(W)); }, x, dx, 1e-4, -1, "dx");
  check_grad([&](const VecD& ww) { return ref(to_d(x), ww); }, W, dW, 1e-4, -1, "dW");
}

// ---------------------------------------------------------------------------------------------
static VecD rmsnorm_ref(const VecD& x, const VecD* g, int64_t rows, int64_t C, double eps) {
  VecD y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
    double s = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = x[r * C + c] * s * (g ? (*g)[c] : 1.0);
  }
  return y;
}

TEST(Ops, RMSNorm) {
  for (bool gain : {false, true}) {
    int64_t rows = 7, C = 37;
    float eps = 1e-6f;
    VecF x = randn(rows * C, 21), g = randn(C, 22, 0.5f), R = randn(rows * C, 23);
    for (auto& v : g) v += 1.0f;
    VecF y(rows * C), rstd(rows), dx(rows * C, 0.5f), dg(C, 0.25f);
    const float* gp = gain ? g.data() : nullptr;
    rmsnorm_fwd(x.data(), gp, y.data(), rstd.data(), rows, C, eps);
    VecD gd = to_d(g);
    VecD yr = rmsnorm_ref(to_d(x), gain ? &gd : nullptr, rows, C, eps);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], yr[i], 1e-5);
    rmsnorm_bwd(x.data(), gp, rstd.data(), R.data(), dx.data(), gain ? dg.data() : nullptr, rows, C);
    for (auto& v : dx) v -= 0.5f;  // it accumulates
    check_grad([&](const VecD& xx) { return dot(rmsnorm_ref(xx, gain ? &gd : nullptr, rows, C, eps), R); },
               x, dx, 1e-4, -1, "dx");
    if (gain) {
      for (auto& v : dg) v -= 0.25f;
      check_grad([&](const VecD& gg) { return dot(rmsnorm_ref(to_d(x), &gg, rows, C, eps), R); }, g,
                 dg, 1e-4, -1, "dg");
    }
  }
}

TEST(Ops, Embedding) {
  int64_t N = 11, C = 19, V = 5;
  std::vector<int32_t> tok = {0, 3, 3, 4, 1, 0, 3, 2, 2, 4, 3};
  VecF wte = randn(V * C, 31), out(N * C), R = randn(N * C, 32), dw(V * C, 0.0f);
  embedding_fwd(tok.data(), wte.data(), out.data(), N, C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(out[n * C + c], wte[tok[n] * C + c]);
  embedding_bwd(tok.data(), R.data(), dw.data(), N, C);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n)
        if (tok[n] == v) s += R[n * C + c];
      EXPECT_NEAR(dw[v * C + c], s, 1e-5);
    }
}

// ---------------------------------------------------------------------------------------------
static VecD rope_ref(const VecD& x, int64_t rows, int T, int hd, double base, int pos0) {
  VecD y(x.size());
  int h2 = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    int pos = pos0 + int(r % T);
    for (int i = 0; i < h2; ++i) {
      double ang = pos * std::pow(base, -2.0 * i / hd);
      double a = x[r * hd + i], b = x[r * hd + i + h2];
      y[r * hd + i] = a * std::cos(ang) - b * std::sin(ang);
      y[r * hd + i + h2] = a * std::sin(ang) + b * std::cos(ang);
    }
  }
  return y;
}

TEST(Ops, Rope) {
  int T = 13, hd = 10, pos0 = 3;
  int64_t rows = 3 * T;
  VecF cs((T + pos0) * hd / 2), sn((T + pos0) * hd / 2);
  rope_tables(cs.data(), sn.data(), T + pos0, hd, 10000.0f);
  VecF x = randn(rows * hd, 41), y = x, R = randn(rows * hd, 42);
  rope_fwd(y.data(), rows, T, hd, cs.data(), sn.data(), pos0);
  VecD yr = rope_ref(to_d(x), rows, T, hd, 10000.0, pos0);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], yr[i], 2e-5);
  VecF dx = R;
  rope_bwd(dx.data(), rows, T, hd, cs.data(), sn.data(), pos0);
  check_grad([&](const VecD& xx) { return dot(rope_ref(xx, rows, T, hd, 10000.0, pos0), R); }, x, dx,
             1e-4);
}

TEST(Ops, SplitMergeHeads) {
  int B = 2, T = 5, nh = 3, hd = 4;
  int64_t ld = 17;
  VecF x = randn(B * T * ld, 51), y(B * nh * T * hd), z(B * T * ld, 0.0f);
  split_heads(x.data() + 2, ld, y.data(), B, T, nh, hd);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h)
      for (int t = 0; t < T; ++t)
        for (int d = 0; d < hd; ++d)
          EXPECT_EQ(y[((b * nh + h) * T + t) * hd + d], x[(b * T + t) * ld + 2 + h * hd + d]);
  merge_heads(y.data(), z.data() + 2, ld, B, T, nh, hd);
  for (int64_t r = 0; r < B * T; ++r)
    for (int c = 0; c < nh * hd; ++c) EXPECT_EQ(z[r * ld + 2 + c], x[r * ld + 2 + c]);
}

// ---------------------------------------------------------------------------------------------
// float64 causal GQA attention; q [B,H,Tq,hd], k/v [B,Hkv,Tk,hd] (dense, Tk_cap == Tk)
static VecD attn_ref(const VecD& q, const VecD& k, const VecD& v, int B, int H, int Hkv, int Tq,
                     int Tk, int hd, VecD* lse = nullptr) {
  VecD o(size_t(B) * H * Tq * hd, 0.0);
  if (lse) lse->assign(size_t(B) * H * Tq, 0.0);
  int group = H / Hkv, off = Tk - Tq;
  double sc = 1.0 / std::sqrt(double(hd));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      int kvh = h / group;
      for (int i = 0; i < Tq; ++i) {
        const double* qi = &q[((size_t(b) * H + h) * Tq + i) * hd];
        int nk = off + i + 1;
        VecD s(nk);
        double mx = -1e300;
        for (int j = 0; j < nk; ++j) {
          const double* kj = &k[((size_t(b) * Hkv + kvh) * Tk + j) * hd];
          double a = 0;
          for (int d = 0; d < hd; ++d) a += qi[d] * kj[d];
          s[j] = a * sc;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < nk; ++j) sum += std::exp(s[j] - mx);
        double* oi = &o[((size_t(b) * H + h) * Tq + i) * hd];
        for (int j = 0; j < nk; ++j) {
          double p = std::exp(s[j] - mx) / sum;
          const double* vj = &v[((size_t(b) * Hkv + kvh) * Tk + j) * hd];
          for (int d = 0; d < hd; ++d) oi[d] += p * vj[d];
        }
        if (lse) (*lse)[(size_t(b) * H + h) * Tq + i] = mx + std::log(sum);
      }
    }
  return o;
}

struct AttnCase { int B, H, Hkv, T, hd; };

TEST(Ops, AttentionForwardBackward) {
  for (AttnCase c : {AttnCase{1, 2, 2, 5, 8}, AttnCase{2, 4, 2, 67, 16}, AttnCase{1, 3, 1, 130, 12},
                     AttnCase{1, 2, 1, 64, 64}, AttnCase{1, 1, 1, 129, 6}}) {
    SCOPED_TRACE(testing::Message() << "B" << c.B << " H" << c.H << " Hkv" << c.Hkv << " T" << c.T
                                    << " hd" << c.hd);
    size_t nq = size_t(c.B) * c.H * c.T * c.hd, nkv = size_t(c.B) * c.Hkv * c.T * c.hd;
    VecF q = randn(nq, 61, 1.5f), k = randn(nkv, 62, 1.5f), v = randn(nkv, 63), R = randn(nq, 64);
    VecF o(nq), lse(size_t(c.B) * c.H * c.T);
    attention_fwd(q.data(), k.data(), v.data(), o.data(), lse.data(), c.B, c.H, c.Hkv, c.T, c.T, c.T,
                  c.hd);
    VecD lr;
    VecD orf = attn_ref(to_d(q), to_d(k), to_d(v), c.B, c.H, c.Hkv, c.T, c.T, c.hd, &lr);
    for (size_t i = 0; i < nq; ++i) ASSERT_NEAR(o[i], orf[i], 2e-5) << i;
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], lr[i], 2e-5) << i;
    VecF dq(nq), dk(nkv), dv(nkv);
    attention_bwd(q.data(), k.data(), v.data(), o.data(), lse.data(), R.data(), dq.data(), dk.data(),
                  dv.data(), c.B, c.H, c.Hkv, c.T, c.hd);
    VecD qd = to_d(q), kd = to_d(k), vd = to_d(v);
    auto L = [&](const VecD& qq, const VecD& kk, const VecD& vv) {
      return dot(attn_ref(qq, kk, vv, c.B, c.H, c.Hkv, c.T, c.T, c.hd), R);
    };
    check_grad([&](const VecD& x) { return L(x, kd, vd); }, q, dq, 2e-4, 60, "dq");
    check_grad([&](const VecD& x) { return L(qd, x, vd); }, k, dk, 2e-4, 60, "dk");
    check_grad([&](const VecD& x) { return L(qd, kd, x); }, v, dv, 2e-4, 60, "dv");
  }
}

TEST(Ops, AttentionQueriesAgainstLongerCache) {
  // KV-cache decoding: Tq new queries at the end of Tk cached keys, cache allocated for Tk_cap.
  int B = 2, H = 4, Hkv = 2, Tq = 3, Tk = 70, cap = 80, hd = 16;
  VecF q = randn(size_t(B) * H * Tq * hd, 71), kc = randn(size_t(B) * Hkv * cap * hd, 72),
       vc = randn(size_t(B) * Hkv * cap * hd, 73);
  VecD kd(size_t(B) * Hkv * Tk * hd), vd(kd.size());
  for (int bh = 0; bh < B * Hkv; ++bh)
    for (int t = 0; t < Tk; ++t)
      for (int d = 0; d < hd; ++d) {
        kd[(size_t(bh) * Tk + t) * hd + d] = kc[(size_t(bh) * cap + t) * hd + d];
        vd[(size_t(bh) * Tk + t) * hd + d] = vc[(size_t(bh) * cap + t) * hd + d];
      }
  VecF o(q.size());
  attention_fwd(q.data(), kc.data(), vc.data(), o.data(), nullptr, B, H, Hkv, Tq, Tk, cap, hd);
  VecD orf = attn_ref(to_d(q), kd, vd, B, H, Hkv, Tq, Tk, hd);
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], orf[i], 2e-5);
}

// ---------------------------------------------------------------------------------------------
TEST(Ops, Activations) {
  int64_t n = 301;
  VecF x = randn(n, 81, 2.0f), R = randn(n, 82), y(n), dx(n);
  auto relu2 = [](double v) { return v > 0 ? v * v : 0.0; };
  auto gelu = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  relu2_fwd(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], relu2(x[i]), 1e-5);
  relu2_bwd(x.data(), R.data(), dx.data(), n);
  check_grad([&](const VecD& xx) { double s = 0; for (int64_t i = 0; i < n; ++i) s += relu2(xx[i]) * R[i]; return s; },
             x, dx, 1e-4, -1, "relu2");
  gelu_fwd(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], gelu(x[i]), 2e-6);
  gelu_bwd(x.data(), R.data(), dx.data(), n);
  check_grad([&](const VecD& xx) { double s = 0; for (int64_t i = 0; i < n; ++i) s += gelu(xx[i]) * R[i]; return s; },
             x, dx, 1e-4, -1, "gelu");
  // SwiGLU over rows of [up | gate]
  int64_t N = 7, Hd = 19;
  VecF hg = randn(N * 2 * Hd, 83, 2.0f), Ry = randn(N * Hd, 84), ys(N * Hd), dhg(N * 2 * Hd);
  auto swiglu = [&](const VecD& h) {
    VecD out(N * Hd);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t i = 0; i < Hd; ++i) {
        double u = h[r * 2 * Hd + i], g = h[r * 2 * Hd + Hd + i];
        out[r * Hd + i] = u * g / (1 + std::exp(-g));
      }
    return out;
  };
  swiglu_fwd(hg.data(), ys.data(), N, Hd);
  VecD yr = swiglu(to_d(hg));
  for (size_t i = 0; i < ys.size(); ++i) EXPECT_NEAR(ys[i], yr[i], 1e-5);
  swiglu_bwd(hg.data(), Ry.data(), dhg.data(), N, Hd);
  check_grad([&](const VecD& h) { return dot(swiglu(h), Ry); }, hg, dhg, 1e-4, -1, "swiglu");
}

TEST(Ops, Residual) {
  VecF a = randn(50, 91), b = randn(50, 92), o(50), da(50, 1.0f), db(50, 2.0f), d = randn(50, 93);
  residual_fwd(a.data(), b.data(), o.data(), 50);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(o[i], a[i] + b[i]);
  residual_bwd(d.data(), da.data(), db.data(), 50);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(da[i], 1.0f + d[i]);
    EXPECT_EQ(db[i], 2.0f + d[i]);
  }
}

TEST(Ops, SoftcapCrossEntropy) {
  for (float cap : {0.0f, 15.0f, 2.0f}) {
    SCOPED_TRACE(cap);
    int64_t N = 9;
    int V = 70, Vp = 128;
    VecF z = randn(N * Vp, 101, 4.0f);
    std::vector<int32_t> tg = {3, 69, 0, -1, 17, 17, 44, -1, 5};
    auto ref = [&](const VecD& zz, int64_t n, int* am = nullptr) {
      double mx = -1e300;
      VecD s(V);
      for (int j = 0; j < V; ++j) {
        s[j] = cap > 0 ? cap * std::tanh(zz[n * Vp + j] / cap) : zz[n * Vp + j];
        if (s[j] > mx) { mx = s[j]; if (am) *am = j; }
      }
      double sum = 0;
      for (int j = 0; j < V; ++j) sum += std::exp(s[j] - mx);
      return tg[n] >= 0 ? mx + std::log(sum) - s[tg[n]] : 0.0;
    };
    VecF g = z, loss(N);
    std::vector<int32_t> am(N);
    float scale = 0.37f;
    double total = softcap_xent(g.data(), tg.data(), N, V, Vp, cap, loss.data(), am.data(), true, scale);
    double rt = 0;
    for (int64_t n = 0; n < N; ++n) {
      int a = -1;
      double l = ref(to_d(z), n, &a);
      EXPECT_NEAR(loss[n], l, 2e-5);
      EXPECT_EQ(am[n], a);
      rt += l;
      for (int j = V; j < Vp; ++j) EXPECT_EQ(g[n * Vp + j], 0.0f);
    }
    EXPECT_NEAR(total, rt, 1e-4);
    check_grad([&](const VecD& zz) { double s = 0; for (int64_t n = 0; n < N; ++n) s += ref(zz, n); return scale * s; },
               z, g, 1e-4, 200, "dlogits");
    // without grad the logits are left softcapped (not overwritten with a gradient)
    VecF h = z;
    softcap_xent(h.data(), tg.data(), N, V, Vp, cap, nullptr, nullptr, false, 1.0f);
    for (int j = 0; j < V; ++j)
      EXPECT_NEAR(h[j], cap > 0 ? cap * std::tanh(z[j] / cap) : z[j], 1e-5);
  }
}

TEST(Ops, FusedQkvHeadsMatchSeparateOps) {
  for (bool qkn : {false, true}) {
    int B = 2, T = 7, H = 4, Hkv = 2, hd = 10;
    int64_t N = B * T, ld = (H + 2 * Hkv) * hd;
    float eps = 1e-6f;
    VecF qkv = randn(N * ld, 111), qg = randn(hd, 112, 0.3f), kg = randn(hd, 113, 0.3f);
    for (auto& v : qg) v += 1;
    for (auto& v : kg) v += 1;
    VecF cs(T * hd / 2), sn(T * hd / 2);
    rope_tables(cs.data(), sn.data(), T, hd, 500.0f);
    size_t nq = N * H * hd, nk = N * Hkv * hd;
    VecF q(nq), k(nk), v(nk), qraw(nq), kraw(nk), qr(N * H), kr(N * Hkv);
    qkv_heads_fwd(qkv.data(), B, T, H, Hkv, hd, qkn, qg.data(), kg.data(), eps, cs.data(), sn.data(),
                  qraw.data(), kraw.data(), qr.data(), kr.data(), q.data(), k.data(), v.data());
    // reference: separate ops
    VecF q2(nq), k2(nk), v2(nk), q3(nq), k3(nk), qr2(N * H), kr2(N * Hkv);
    split_heads(qkv.data(), ld, q2.data(), B, T, H, hd);
    split_heads(qkv.data() + H * hd, ld, k2.data(), B, T, Hkv, hd);
    split_heads(qkv.data() + (H + Hkv) * hd, ld, v2.data(), B, T, Hkv, hd);
    if (qkn) {
      rmsnorm_fwd(q2.data(), qg.data(), q3.data(), qr2.data(), N * H, hd, eps);
      rmsnorm_fwd(k2.data(), kg.data(), k3.data(), kr2.data(), N * Hkv, hd, eps);
    } else {
      q3 = q2;
      k3 = k2;
    }
    rope_fwd(q3.data(), N * H, T, hd, cs.data(), sn.data());
    rope_fwd(k3.data(), N * Hkv, T, hd, cs.data(), sn.data());
    for (size_t i = 0; i < nq; ++i) ASSERT_NEAR(q[i], q3[i], 1e-5);
    for (size_t i = 0; i < nk; ++i) ASSERT_NEAR(k[i], k3[i], 1e-5);
    for (size_t i = 0; i < nk; ++i) ASSERT_EQ(v[i], v2[i]);
    // backward against the separate backward ops
    VecF dq = randn(nq, 114), dk = randn(nk, 115), dv = randn(nk, 116), dqkv(N * ld);
    VecF dqg(hd, 0.0f), dkg(hd, 0.0f);
    qkv_heads_bwd(dq.data(), dk.data(), dv.data(), qraw.data(), kraw.data(), qr.data(), kr.data(),
                  qg.data(), kg.data(), dqg.data(), dkg.data(), B, T, H, Hkv, hd, qkn, cs.data(),
                  sn.data(), dqkv.data());
    VecF rq = dq, rk = dk, xq(nq, 0.0f), xk(nk, 0.0f), rqg(hd, 0.0f), rkg(hd, 0.0f), full(N * ld);
    rope_bwd(rq.data(), N * H, T, hd, cs.data(), sn.data());
    rope_bwd(rk.data(), N * Hkv, T, hd, cs.data(), sn.data());
    if (qkn) {
      rmsnorm_bwd(q2.data(), qg.data(), qr2.data(), rq.data(), xq.data(), rqg.data(), N * H, hd);
      rmsnorm_bwd(k2.data(), kg.data(), kr2.data(), rk.data(), xk.data(), rkg.data(), N * Hkv, hd);
    } else {
      xq = rq;
      xk = rk;
    }
    merge_heads(xq.data(), full.data(), ld, B, T, H, hd);
    merge_heads(xk.data(), full.data() + H * hd, ld, B, T, Hkv, hd);
    merge_heads(dv.data(), full.data() + (H + Hkv) * hd, ld, B, T, Hkv, hd);
    for (size_t i = 0; i < full.size(); ++i) ASSERT_NEAR(dqkv[i], full[i], 1e-5);
    for (int d = 0; d < hd; ++d) {
      EXPECT_NEAR(dqg[d], rqg[d], 1e-4);
      EXPECT_NEAR(dkg[d], rkg[d], 1e-4);
    }
    // bf16 output = rounded fp32 output
    std::vector<bf16> db(N * ld);
    VecF dqg2(hd, 0.0f), dkg2(hd, 0.0f);
    qkv_heads_bwd(dq.data(), dk.data(), dv.data(), qraw.data(), kraw.data(), qr.data(), kr.data(),
                  qg.data(), kg.data(), dqg2.data(), dkg2.data(), B, T, H, Hkv, hd, qkn, cs.data(),
                  sn.data(), db.data());
    for (size_t i = 0; i < db.size(); ++i) ASSERT_EQ(db[i], f32_to_bf16(dqkv[i]));
  }
}

TEST(Ops, Bf16OutputVariantsRoundTheFp32Result) {
  int64_t N = 5, C = 67;
  VecF x = randn(N * C, 121), g = randn(C, 122), y(N * C), r(N), dy = randn(N * C, 123);
  std::vector<bf16> yb(N * C);
  rmsnorm_fwd(x.data(), g.data(), y.data(), r.data(), N, C, 1e-6f);
  rmsnorm_fwd(x.data(), g.data(), yb.data(), r.data(), N, C, 1e-6f);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(yb[i], f32_to_bf16(y[i]));
  relu2_fwd(x.data(), y.data(), N * C);
  relu2_fwd(x.data(), yb.data(), N * C);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(yb[i], f32_to_bf16(y[i]));
  gelu_bwd(x.data(), dy.data(), y.data(), N * C);
  gelu_bwd(x.data(), dy.data(), yb.data(), N * C);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(yb[i], f32_to_bf16(y[i]));
  VecF hg = randn(N * 2 * C, 124), sy(N * C);
  std::vector<bf16> sb(N * C), dhb(N * 2 * C);
  VecF dh(N * 2 * C);
  swiglu_fwd(hg.data(), sy.data(), N, C);
  swiglu_fwd(hg.data(), sb.data(), N, C);
  for (size_t i = 0; i < sy.size(); ++i) ASSERT_EQ(sb[i], f32_to_bf16(sy[i]));
  swiglu_bwd(hg.data(), dy.data(), dh.data(), N, C);
  swiglu_bwd(hg.data(), dy.data(), dhb.data(), N, C);
  for (size_t i = 0; i < dh.size(); ++i) ASSERT_EQ(dhb[i], f32_to_bf16(dh[i]));
}
