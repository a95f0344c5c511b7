// The GEMM attention's block plan (backend/attention_blocks.h) on the CPU: the plan covers every
// visible (query, key) pair exactly once and no key outside its range; the workspace layouts are
// aligned, disjoint and sized from the plan; and the plan executed step for step as the CUDA
// launchers do (same GEMM shapes, leading dimensions, offsets and batch strides, here in float64)
// matches a dense float64 attention, forward and backward, also with the bf16 roundings of the
// device path (inputs, P, dS) within the tolerances the CUDA op tests allow it. Also the rules of
// CLOCKLM_CUDA_ATTENTION (backend/cuda/attention_select.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/attention_blocks.h"
#include "backend/cuda/attention_select.h"
#include "backend/dtype.h"
#include "core/common.h"
#include "test_cli_util.h"
#include "test_num_util.h"

using namespace clm;
using num_test::randn;
using num_test::to_d;
using VecD = std::vector<double>;

namespace {

// ---- the plan's coverage -------------------------------------------------------------------------
void expect_exact_cover(int Tq, int Tk, int window, int rows) {
  SCOPED_TRACE(testing::Message() << "Tq " << Tq << " Tk " << Tk << " window " << window
                                  << " block " << rows);
  const AttnPlan plan = attention_plan(Tq, Tk, window, rows);
  const int off = Tk - Tq;
  std::vector<int> seen(size_t(Tq) * Tk, 0);
  int next_row = 0;
  int64_t max_tile = 0;
  for (const AttnBlock& b : plan.blocks) {
    ASSERT_EQ(b.q0, next_row);  // the blocks partition the queries in order
    ASSERT_GE(b.nq, 1);
    ASSERT_LE(b.nq, rows);
    next_row = b.q0 + b.nq;
    ASSERT_GE(b.k0, 0);
    ASSERT_GE(b.nk, 1);
    ASSERT_LE(b.k0 + b.nk, Tk);  // never a key past Tk (the cache's garbage)
    ASSERT_GE(b.ld, b.nk);
    ASSERT_EQ(b.ld % 8, 0);
    max_tile = std::max(max_tile, int64_t(b.nq) * b.ld);
    std::vector<bool> key_used(size_t(b.nk), false);
    for (int i = b.q0; i < b.q0 + b.nq; ++i)
      for (int j = b.k0; j < b.k0 + b.nk; ++j)
        if (attention_visible(off + i, j, window)) {
          ++seen[size_t(i) * Tk + j];
          key_used[size_t(j - b.k0)] = true;
        }
    // tight: every key of the range is seen by some row of the block
    for (int c = 0; c < b.nk; ++c) ASSERT_TRUE(key_used[size_t(c)]) << "key " << b.k0 + c;
  }
  ASSERT_EQ(next_row, Tq);
  EXPECT_EQ(plan.max_tile, max_tile);
  for (int i = 0; i < Tq; ++i)
    for (int j = 0; j < Tk; ++j) {
      const int p = off + i;
      const bool vis = j <= p && (window <= 0 || p - j < window);  // the rule, written out
      ASSERT_EQ(attention_visible(p, j, window), vis) << i << "," << j;
      ASSERT_EQ(seen[size_t(i) * Tk + j], vis ? 1 : 0) << "query " << i << " key " << j;
    }
}

// ---- a float64 executor of the plan, mirroring attention_gemm.cu ---------------------------------
double rnd(double x, bool bf) { return bf ? double(bf16_to_f32(f32_to_bf16(float(x)))) : x; }

// Row-major, batched: D[M,N] = op(A) op(B) + beta D with A stored [M,K] (ta: [K,M]) and B [K,N]
// (tb: [N,K]) at row strides lda, ldb, ldd and batch strides sa, sb, sd: the GPU's gemm_rm.
void gemm_rm(bool ta, bool tb, int M, int N, int K, const double* A, int lda, int64_t sa,
             const double* B, int ldb, int64_t sb, double* D, int ldd, int64_t sd, double beta,
             int batch) {
  for (int z = 0; z < batch; ++z)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k)
          acc += A[z * sa + (ta ? int64_t(k) * lda + m : int64_t(m) * lda + k)] *
                 B[z * sb + (tb ? int64_t(n) * ldb + k : int64_t(k) * ldb + n)];
        double& d = D[z * sd + int64_t(m) * ldd + n];
        d = acc + (beta != 0 ? beta * d : 0.0);
      }
}

struct Shape {
  int B, H, Hkv, Tq, Tk, cap, hd, window;
};

// heads_bf16: [B*H, T, hd] from Hx heads of cap rows, rounded when bf.
VecD heads(const VecD& x, int B, int H, int Hx, int T, int cap, int hd, bool bf) {
  VecD y(size_t(B) * H * T * hd);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t)
        for (int d = 0; d < hd; ++d)
          y[((size_t(b) * H + h) * T + t) * hd + d] =
              rnd(x[((size_t(b) * Hx + h / (H / Hx)) * cap + t) * hd + d], bf);
  return y;
}

void plan_fwd(const Shape& s, int rows, bool bf, const VecD& q, const VecD& k, const VecD& v,
              VecD& o, VecD& lse) {
  const int BH = s.B * s.H, off = s.Tk - s.Tq;
  const double scale = 1.0 / std::sqrt(double(s.hd));
  const AttnPlan plan = attention_plan(s.Tq, s.Tk, s.window, rows);
  VecD qb = heads(q, s.B, s.H, s.H, s.Tq, s.Tq, s.hd, bf),
       kb = heads(k, s.B, s.H, s.Hkv, s.Tk, s.cap, s.hd, bf),
       vb = heads(v, s.B, s.H, s.Hkv, s.Tk, s.cap, s.hd, bf);
  VecD S(size_t(BH) * plan.max_tile), P(S.size());
  o.assign(size_t(BH) * s.Tq * s.hd, NAN);
  lse.assign(size_t(BH) * s.Tq, NAN);
  for (const AttnBlock& b : plan.blocks) {
    const int64_t tile = int64_t(b.nq) * b.ld;
    gemm_rm(false, true, b.nq, b.nk, s.hd, &qb[size_t(b.q0) * s.hd], s.hd, int64_t(s.Tq) * s.hd,
            &kb[size_t(b.k0) * s.hd], s.hd, int64_t(s.Tk) * s.hd, S.data(), b.ld, tile, 0, BH);
    for (int64_t row = 0; row < int64_t(BH) * b.nq; ++row) {  // softmax_rows_k
      const int64_t bh = row / b.nq;
      const int pos = off + b.q0 + int(row % b.nq);
      double m = -INFINITY, l = 0;
      for (int c = 0; c < b.nk; ++c)
        if (attention_visible(pos, b.k0 + c, s.window)) m = std::max(m, S[row * b.ld + c] * scale);
      for (int c = 0; c < b.nk; ++c)
        if (attention_visible(pos, b.k0 + c, s.window)) l += std::exp(S[row * b.ld + c] * scale - m);
      const double L = m + std::log(l);
      for (int c = 0; c < b.nk; ++c)
        P[row * b.ld + c] = attention_visible(pos, b.k0 + c, s.window)
                                ? rnd(std::exp(S[row * b.ld + c] * scale - L), bf)
                                : 0.0;
      lse[bh * s.Tq + b.q0 + row % b.nq] = L;
    }
    gemm_rm(false, false, b.nq, s.hd, b.nk, P.data(), b.ld, tile, &vb[size_t(b.k0) * s.hd], s.hd,
            int64_t(s.Tk) * s.hd, &o[size_t(b.q0) * s.hd], s.hd, int64_t(s.Tq) * s.hd, 0, BH);
  }
}

void plan_bwd(const Shape& s, int rows, bool bf, const VecD& q, const VecD& k, const VecD& v,
              const VecD& o, const VecD& lse, const VecD& dout, VecD& dq, VecD& dk, VecD& dv) {
  const int BH = s.B * s.H, T = s.Tq, hd = s.hd, G = s.H / s.Hkv;
  const double scale = 1.0 / std::sqrt(double(hd));
  const AttnPlan plan = attention_plan(T, T, s.window, rows);
  VecD qb = heads(q, s.B, s.H, s.H, T, T, hd, bf), kb = heads(k, s.B, s.H, s.Hkv, T, T, hd, bf),
       vb = heads(v, s.B, s.H, s.Hkv, T, T, hd, bf), dob = heads(dout, s.B, s.H, s.H, T, T, hd, bf);
  VecD D(size_t(BH) * T);
  for (size_t r = 0; r < D.size(); ++r) {  // rowdot_k: the rounded dO (as in dP) times O
    double acc = 0;
    for (int d = 0; d < hd; ++d) acc += dob[r * hd + d] * o[r * hd + d];
    D[r] = acc;
  }
  VecD S(size_t(BH) * plan.max_tile), dP(S.size()), P(S.size()), dS(S.size());
  VecD gk(size_t(BH) * T * hd, 0.0), gv(gk.size(), 0.0);
  dq.assign(gk.size(), NAN);
  const int64_t hs = int64_t(T) * hd;
  for (const AttnBlock& b : plan.blocks) {
    const int64_t tile = int64_t(b.nq) * b.ld;
    gemm_rm(false, true, b.nq, b.nk, hd, &qb[size_t(b.q0) * hd], hd, hs, &kb[size_t(b.k0) * hd], hd,
            hs, S.data(), b.ld, tile, 0, BH);
    gemm_rm(false, true, b.nq, b.nk, hd, &dob[size_t(b.q0) * hd], hd, hs, &vb[size_t(b.k0) * hd],
            hd, hs, dP.data(), b.ld, tile, 0, BH);
    for (int64_t row = 0; row < int64_t(BH) * b.nq; ++row) {  // probs_ds_k
      const int64_t bh = row / b.nq;
      const int pos = b.q0 + int(row % b.nq);
      for (int c = 0; c < b.nk; ++c) {
        const size_t e = size_t(row * b.ld + c);
        const double pv = attention_visible(pos, b.k0 + c, s.window)
                              ? std::exp(S[e] * scale - lse[size_t(bh * T + pos)])
                              : 0.0;
        P[e] = rnd(pv, bf);
        dS[e] = rnd(pv * (dP[e] - D[size_t(bh * T + pos)]) * scale, bf);
      }
    }
    gemm_rm(true, false, b.nk, hd, b.nq, P.data(), b.ld, tile, &dob[size_t(b.q0) * hd], hd, hs,
            &gv[size_t(b.k0) * hd], hd, hs, 1, BH);
    gemm_rm(true, false, b.nk, hd, b.nq, dS.data(), b.ld, tile, &qb[size_t(b.q0) * hd], hd, hs,
            &gk[size_t(b.k0) * hd], hd, hs, 1, BH);
    gemm_rm(false, false, b.nq, hd, b.nk, dS.data(), b.ld, tile, &kb[size_t(b.k0) * hd], hd, hs,
            &dq[size_t(b.q0) * hd], hd, hs, 0, BH);
  }
  dk.assign(size_t(s.B) * s.Hkv * T * hd, 0.0);  // group_sum_k
  dv.assign(dk.size(), 0.0);
  for (size_t i = 0; i < dk.size(); ++i) {
    const size_t bg = i / size_t(hs), rest = i % size_t(hs);
    for (int j = 0; j < G; ++j) {
      dk[i] += gk[(bg * G + j) * hs + rest];
      dv[i] += gv[(bg * G + j) * hs + rest];
    }
  }
}

// ---- dense float64 reference --------------------------------------------------------------------
// q [B,H,Tq,hd], k/v [B,Hkv,cap,hd] (first Tk rows used); query i at position Tk - Tq + i.
VecD dense_attention(const Shape& s, const VecD& q, const VecD& k, const VecD& v,
                     VecD* lse = nullptr) {
  VecD o(size_t(s.B) * s.H * s.Tq * s.hd, 0.0);
  if (lse) lse->assign(size_t(s.B) * s.H * s.Tq, 0.0);
  const double sc = 1.0 / std::sqrt(double(s.hd));
  VecD w(size_t(s.Tk));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h) {
      const size_t kv = (size_t(b) * s.Hkv + h / (s.H / s.Hkv)) * s.cap;
      for (int i = 0; i < s.Tq; ++i) {
        const size_t qi = (size_t(b) * s.H + h) * s.Tq + i;
        const int p = s.Tk - s.Tq + i;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < s.Tk; ++j) {
          if (!(j <= p && (s.window <= 0 || p - j < s.window))) continue;
          double a = 0;
          for (int d = 0; d < s.hd; ++d) a += q[qi * s.hd + d] * k[(kv + j) * s.hd + d];
          w[size_t(j)] = a * sc;
          mx = std::max(mx, a * sc);
        }
        for (int j = 0; j < s.Tk; ++j)
          if (j <= p && (s.window <= 0 || p - j < s.window)) sum += std::exp(w[size_t(j)] - mx);
        for (int j = 0; j < s.Tk; ++j) {
          if (!(j <= p && (s.window <= 0 || p - j < s.window))) continue;
          const double pr = std::exp(w[size_t(j)] - mx) / sum;
          for (int d = 0; d < s.hd; ++d) o[qi * s.hd + d] += pr * v[(kv + j) * s.hd + d];
        }
        if (lse) (*lse)[qi] = mx + std::log(sum);
      }
    }
  return o;
}

VecD abs_of(VecD x) {
  for (double& e : x) e = std::abs(e);
  return x;
}
VecD rounded(VecD x) {
  for (double& e : x) e = rnd(e, true);
  return x;
}

// Worst |got - ref| / (abs + rel * scale) over the elements; <= 1 passes.
double worst_error(const VecD& got, const VecD& ref, double abs, double rel, const VecD& scale) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::abs(got[i] - ref[i]) / (abs + rel * scale[i]);
    if (std::isnan(e)) e = INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

// Central differences of the dense reference's sum(o * R) at `samples` coordinates of one input
// against the plan's gradient: |fd - g| <= tol * max(1, max |fd|).
void expect_grad(const std::function<double(const VecD&)>& loss, const VecD& x, const VecD& g,
                 double tol, int samples, const char* what) {
  Rng pick(5);
  VecD xd = x;
  std::vector<size_t> idx;
  VecD fd;
  double max_fd = 0;
  for (int s = 0; s < samples; ++s) {
    const size_t i = size_t(pick.next() % x.size());
    const double h = 1e-5 * std::max(1.0, std::abs(x[i]));
    xd[i] = x[i] + h;
    const double lp = loss(xd);
    xd[i] = x[i] - h;
    const double lm = loss(xd);
    xd[i] = x[i];
    idx.push_back(i);
    fd.push_back((lp - lm) / (2 * h));
    max_fd = std::max(max_fd, std::abs(fd.back()));
  }
  for (size_t s = 0; s < idx.size(); ++s)
    EXPECT_NEAR(g[idx[s]], fd[s], tol * std::max(1.0, max_fd)) << what << " coordinate " << idx[s];
}

double dot(const VecD& a, const VecD& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Forward (and, with Tq == Tk == cap, backward) of the plan against the dense reference: float64
// within 1e-9 (gradients within 1e-6 of the finite differences); with bf16 roundings within the
// CUDA op tests' bounds for the gemm implementation (o: 2e-5 + 2^-7 sum P|v| against the
// reference on the rounded inputs; gradients: 3e-2 of the finite differences).
void check_plan(const Shape& s, int rows, bool bf) {
  SCOPED_TRACE(testing::Message() << "B" << s.B << " H" << s.H << " Hkv" << s.Hkv << " Tq" << s.Tq
                                  << " Tk" << s.Tk << " cap" << s.cap << " hd" << s.hd << " window "
                                  << s.window << " block " << rows << (bf ? " bf16" : " f64"));
  const size_t nq = size_t(s.B) * s.H * s.Tq * s.hd, nkv = size_t(s.B) * s.Hkv * s.cap * s.hd;
  VecD q = to_d(randn(nq, 61 + s.hd, 1.5f)), k = to_d(randn(nkv, 62, 1.5f)),
       v = to_d(randn(nkv, 63)), R = to_d(randn(nq, 64));
  for (size_t i = 0; i < nkv; ++i)  // cache slots past Tk: garbage a plan must never read
    if (int((i / size_t(s.hd)) % size_t(s.cap)) >= s.Tk) k[i] = v[i] = 1e30;
  VecD o, lse;
  plan_fwd(s, rows, bf, q, k, v, o, lse);
  VecD lref;
  const VecD qr = bf ? rounded(q) : q, kr = bf ? rounded(k) : k, vr = bf ? rounded(v) : v;
  const VecD oref = dense_attention(s, qr, kr, vr, &lref);
  const VecD ones(o.size(), 1.0), pv = dense_attention(s, qr, kr, abs_of(vr));
  EXPECT_LE(worst_error(o, oref, bf ? 2e-5 : 1e-9, bf ? 1.0 / 128 : 0.0, pv), 1.0) << "o";
  EXPECT_LE(worst_error(lse, lref, bf ? 2e-5 : 1e-9, 0.0, VecD(lse.size(), 0.0)), 1.0) << "lse";
  if (bf) {  // the roundings are visible: the bound above is not vacuous
    EXPECT_GT(worst_error(o, dense_attention(s, q, k, v), 1e-9, 0, ones), 1.0);
  }
  if (s.Tq != s.Tk || s.Tk != s.cap) return;
  VecD dq, dk, dv;
  plan_bwd(s, rows, bf, q, k, v, o, lse, R, dq, dk, dv);
  auto L = [&](const VecD& qq, const VecD& kk, const VecD& vv) {
    return dot(dense_attention(s, qq, kk, vv), R);
  };
  const double tol = bf ? 3e-2 : 1e-6;
  expect_grad([&](const VecD& x) { return L(x, k, v); }, q, dq, tol, 40, "dq");
  expect_grad([&](const VecD& x) { return L(q, x, v); }, k, dk, tol, 40, "dk");
  expect_grad([&](const VecD& x) { return L(q, k, x); }, v, dv, tol, 40, "dv");
}

}  // namespace

TEST(AttentionBlocks, PlanCoversEveryVisiblePairOnce) {
  for (int rows : {1, 3, 8, 16, 128})
    for (int window : {0, 1, 5, 16, 40, 1000}) {
      expect_exact_cover(37, 37, window, rows);    // T not a multiple of the block
      expect_exact_cover(64, 64, window, rows);    // a multiple
      expect_exact_cover(5, 70, window, rows);     // KV cache: 5 queries at the end of 70 keys
      expect_exact_cover(1, 129, window, rows);    // decoding one token
      expect_exact_cover(0, 10, window, rows);     // no queries: no blocks
    }
}

TEST(AttentionBlocks, PlanRefusesBadArguments) {
  EXPECT_THROW(attention_plan(5, 4, 0, 8), Error);   // more queries than keys
  EXPECT_THROW(attention_plan(-1, 4, 0, 8), Error);
  EXPECT_THROW(attention_plan(4, 4, 0, 0), Error);
  EXPECT_EQ(attention_block_rows(1), 1);
  EXPECT_EQ(attention_block_rows(100), 100);
  EXPECT_EQ(attention_block_rows(2048), 128);
}

TEST(AttentionBlocks, WorkspaceLayoutsAreAlignedDisjointAndSized) {
  const int BH = 6, hd = 24;
  const AttnPlan plan = attention_plan(70, 70, 0, 16);
  // The largest tile is the last block's: 6 rows over all 70 keys, ld 72; or a full block of 16
  // rows over 64 keys.
  EXPECT_EQ(plan.max_tile, std::max<int64_t>(6 * 72, 16 * 64));
  const size_t heads2 = size_t(BH) * 70 * hd * 2, tile = size_t(BH) * size_t(plan.max_tile);
  auto check_regions = [](std::vector<std::pair<size_t, size_t>> r, size_t bytes) {
    std::sort(r.begin(), r.end());
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(r[i].first % 256, 0u);
      const size_t end = r[i].first + r[i].second;
      EXPECT_LE(end, i + 1 < r.size() ? r[i + 1].first : bytes);
      if (i + 1 == r.size()) {
        EXPECT_EQ(end, bytes);
      }
    }
  };
  const AttnFwdLayout f = attention_fwd_layout(plan, BH, hd);
  check_regions({{f.q, heads2}, {f.k, heads2}, {f.v, heads2}, {f.s, tile * 4}, {f.p, tile * 2}},
                f.bytes);
  for (bool expand : {false, true}) {
    const AttnBwdLayout b = attention_bwd_layout(plan, BH, hd, expand);
    std::vector<std::pair<size_t, size_t>> r = {
        {b.q, heads2},       {b.k, heads2},       {b.v, heads2},       {b.dout, heads2},
        {b.rows, size_t(BH) * 70 * 4}, {b.s, tile * 4}, {b.dp, tile * 4}, {b.p, tile * 2},
        {b.ds, tile * 2}};
    if (expand) {
      r.push_back({b.dk, heads2 * 2});
      r.push_back({b.dv, heads2 * 2});
    } else {
      EXPECT_EQ(b.dk, 0u);
      EXPECT_EQ(b.dv, 0u);
    }
    check_regions(r, b.bytes);
  }
  // A KV-cache forward sizes q by Tq and k, v by Tk.
  const AttnFwdLayout kv = attention_fwd_layout(attention_plan(3, 50, 0, 16), BH, hd);
  EXPECT_EQ(kv.k - kv.q, (size_t(BH) * 3 * hd * 2 + 255) / 256 * 256);
  EXPECT_EQ(kv.v - kv.k, (size_t(BH) * 50 * hd * 2 + 255) / 256 * 256);
}

TEST(AttentionBlocks, PlanMatchesDenseAttentionInFloat64) {
  for (bool bf : {false, true}) {
    check_plan({1, 2, 2, 37, 37, 37, 16, 0}, 8, bf);    // causal MHA, T not a multiple of 8
    check_plan({2, 4, 2, 33, 33, 33, 12, 0}, 16, bf);   // GQA 4/2, hd not a power of two
    check_plan({1, 4, 1, 20, 20, 20, 6, 0}, 7, bf);     // MQA, odd block
    check_plan({1, 2, 1, 40, 40, 40, 64, 0}, 16, bf);   // hd 64
    check_plan({1, 2, 2, 45, 45, 45, 8, 5}, 8, bf);     // window smaller than a block
    check_plan({1, 4, 2, 50, 50, 50, 8, 19}, 16, bf);   // window across blocks, GQA
    check_plan({2, 4, 2, 3, 30, 36, 16, 0}, 2, bf);     // KV cache: Tq < Tk < cap
    check_plan({1, 2, 1, 9, 41, 48, 10, 7}, 4, bf);     // KV cache with a window
    check_plan({1, 2, 2, 1, 17, 17, 24, 0}, 128, bf);   // one decoded token
  }
}

TEST(AttentionSelect, ModesAndTheAutoRule) {
  using namespace clm::cuda;
  EXPECT_EQ(parse_attention_mode("auto", "x"), AttnMode::Auto);
  EXPECT_EQ(parse_attention_mode("fp32", "x"), AttnMode::Fp32);
  EXPECT_EQ(parse_attention_mode("gemm", "x"), AttnMode::Gemm);
  EXPECT_EQ(parse_attention_mode("cudnn", "x"), AttnMode::Cudnn);
  EXPECT_STREQ(attention_mode_name(AttnMode::Cudnn), "cudnn");
  EXPECT_STREQ(attention_impl_name(AttnImpl::Cudnn), "cudnn");
  try {
    parse_attention_mode("tf32", "CLOCKLM_CUDA_ATTENTION");
    FAIL() << "tf32 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("CLOCKLM_CUDA_ATTENTION"), std::string::npos) << m;
    EXPECT_NE(m.find("'tf32'"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_EQ(faster_attention(1.0, 0.5), AttnImpl::Gemm);
  EXPECT_EQ(faster_attention(1.0, 0.95), AttnImpl::Fp32);  // a near tie keeps fp32
  EXPECT_EQ(faster_attention(0.5, 1.0), AttnImpl::Fp32);
  // Three candidates: each later one must beat the pick so far by 10%.
  using I = AttnImpl;
  EXPECT_EQ(fastest_attention({{I::Fp32, 1.0}, {I::Gemm, 0.5}, {I::Cudnn, 0.2}}), I::Cudnn);
  EXPECT_EQ(fastest_attention({{I::Fp32, 1.0}, {I::Gemm, 0.5}, {I::Cudnn, 0.46}}), I::Gemm);
  EXPECT_EQ(fastest_attention({{I::Fp32, 1.0}, {I::Gemm, 1.2}, {I::Cudnn, 0.85}}), I::Cudnn);
  EXPECT_EQ(fastest_attention({{I::Gemm, 1.0}, {I::Cudnn, 0.95}}), I::Gemm);
  EXPECT_EQ(fastest_attention({{I::Cudnn, 1.0}}), I::Cudnn);
  EXPECT_THROW(fastest_attention({}), Error);
  AttnChoices c;
  EXPECT_EQ(c.summary(), "none timed yet");
  const AttnShape a{.B = 1, .H = 2, .Hkv = 2, .Tq = 8, .Tk = 8, .Tk_cap = 8, .hd = 16};
  AttnShape b = a, d = a;
  b.backward = true;
  d.Tq = d.Tk = d.Tk_cap = 16;
  EXPECT_FALSE(c.find(a).has_value());
  c.record(a, AttnImpl::Gemm);
  c.record(b, AttnImpl::Fp32);
  c.record(d, AttnImpl::Fp32);
  EXPECT_EQ(c.find(a), AttnImpl::Gemm);
  EXPECT_EQ(c.find(b), AttnImpl::Fp32);
  EXPECT_EQ(c.summary(), "fwd gemm 1, fp32 1; bwd fp32 1");
  AttnShape e = a;
  e.Tq = e.Tk = e.Tk_cap = 32;
  c.record(e, AttnImpl::Cudnn);
  EXPECT_EQ(c.summary(), "fwd cudnn 1, gemm 1, fp32 1; bwd fp32 1");
}

TEST(AttentionSelect, InfoShowsTheSettingAndRefusesAnUnknownOne) {
  cli_test::CmdResult r =
      cli_test::run_cmd("CLOCKLM_CUDA_ATTENTION=gemm " + std::string(CLOCKLM_BINARY) + " info");
  EXPECT_EQ(r.status, 0) << r.out;
  if (r.out.find("cuda backend compiled: yes") != std::string::npos) {
    EXPECT_NE(r.out.find("cuda attention: gemm"), std::string::npos) << r.out;
  }
  r = cli_test::run_cmd("CLOCKLM_CUDA_ATTENTION=fast " + std::string(CLOCKLM_BINARY) + " info");
  if (r.out.find("cuda backend compiled: no") != std::string::npos) return;  // no CUDA setting
  EXPECT_EQ(r.status, 1) << r.out;
  const size_t at = r.out.find("clocklm: error: CLOCKLM_CUDA_ATTENTION: CUDA attention 'fast'");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);  // the whole message
  EXPECT_NE(line.find("(auto | fp32 | gemm | cudnn)"), std::string::npos) << r.out;
}

