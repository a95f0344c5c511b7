// Optimizer tests: AdamW against hand-computed steps, Newton-Schulz against a float64 reference and
// its singular values in the quintic's band, the batched Newton-Schulz against one matrix at a time
// (alone and inside an optimizer step), Muon's update scaling, parameter routing, grad clipping
// and the state save/load round trip (bit-exact continuation, mismatches refused).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <sstream>
#include <vector>

#include "core/common.h"
#include "backend/cpu/optim_kernels.h"
#include "backend/cpu/newton_schulz.h"
#include "optim/optim.h"
#include "optim/optim_state.h"

using namespace clm;

namespace {

// Symmetric eigenvalues by cyclic Jacobi rotations (float64), for singular values via O O^T.
std::vector<double> jacobi_eigenvalues(std::vector<double> A, int n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j) off += A[i * n + j] * A[i * n + j];
    if (off < 1e-22) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        double apq = A[p * n + q];
        if (std::abs(apq) < 1e-300) continue;
        double theta = (A[q * n + q] - A[p * n + p]) / (2 * apq);
        double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // rotate columns p, q
          double akp = A[k * n + p], akq = A[k * n + q];
          A[k * n + p] = c * akp - s * akq;
          A[k * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rotate rows p, q
          double apk = A[p * n + k], aqk = A[q * n + k];
          A[p * n + k] = c * apk - s * aqk;
          A[q * n + k] = s * apk + c * aqk;
        }
      }
  }
  std::vector<double> ev(n);
  for (int i = 0; i < n; ++i) ev[i] = A[i * n + i];
  return ev;
}

// Singular values of a rows x cols matrix from the eigenvalues of its short-side Gram matrix.
std::vector<double> singular_values(const std::vector<float>& M, int rows, int cols) {
  int a = std::min(rows, cols);
  std::vector<double> G(size_t(a) * a, 0.0);
  for (int i = 0; i < a; ++i)
    for (int j = 0; j < a; ++j) {
      double s = 0;
      if (rows <= cols)
        for (int k = 0; k < cols; ++k) s += double(M[i * cols + k]) * M[j * cols + k];
      else
        for (int k = 0; k < rows; ++k) s += double(M[k * cols + i]) * M[k * cols + j];
      G[i * a + j] = s;
    }
  auto ev = jacobi_eigenvalues(G, a);
  for (auto& e : ev) e = std::sqrt(std::max(0.0, e));
  return ev;
}

// The same quintic iteration in float64 on the un-transposed matrix (the reference).
std::vector<double> ns_reference(const std::vector<float>& G, int rows, int cols, int steps) {
  const double kNsA = 3.4445, kNsB = -4.7750, kNsC = 2.0315;
  bool tr = rows > cols;
  int a = tr ? cols : rows, b = tr ? rows : cols;
  std::vector<double> X(size_t(a) * b);
  double ss = 0;
  for (float g : G) ss += double(g) * g;
  double inv = 1.0 / (std::sqrt(ss) + 1e-7);
  for (int i = 0; i < a; ++i)
    for (int j = 0; j < b; ++j) X[i * b + j] = (tr ? G[j * cols + i] : G[i * b + j]) * inv;
  for (int it = 0; it < steps; ++it) {
    std::vector<double> A(size_t(a) * a, 0.0), B(size_t(a) * a, 0.0), Y(size_t(a) * b, 0.0);
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < a; ++j)
        for (int k = 0; k < b; ++k) A[i * a + j] += X[i * b + k] * X[j * b + k];
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < a; ++j) {
        double s = 0;
        for (int k = 0; k < a; ++k) s += A[i * a + k] * A[k * a + j];
        B[i * a + j] = double(kNsB) * A[i * a + j] + double(kNsC) * s;
      }
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < b; ++j) {
        double s = 0;
        for (int k = 0; k < a; ++k) s += B[i * a + k] * X[k * b + j];
        Y[i * b + j] = double(kNsA) * X[i * b + j] + s;
      }
    X.swap(Y);
  }
  std::vector<double> out(G.size());
  for (int i = 0; i < a; ++i)
    for (int j = 0; j < b; ++j) (tr ? out[j * cols + i] : out[i * b + j]) = X[i * b + j];
  return out;
}

std::vector<float> random_matrix(int rows, int cols, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> m(size_t(rows) * cols);
  for (auto& x : m) x = rng.normal();
  return m;
}

// Overwrite in place: the Params point into these buffers, so they must never be reallocated.
void set_to(std::vector<float>& dst, const std::vector<float>& src) {
  ASSERT_EQ(dst.size(), src.size());
  std::copy(src.begin(), src.end(), dst.begin());
}

Param make_param(const std::string& name, std::vector<int64_t> shape, ParamKind kind, std::vector<float>& data,
                 std::vector<float>& grad) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  data.assign(size_t(n), 0.0f);
  grad.assign(size_t(n), 0.0f);
  return Param{name, shape, kind, data.data(), grad.data(), &cpu_backend()};  // host memory is CPU device memory
}

}  // namespace

TEST(Optim, AdamWMatchesHandComputedSteps) {
  std::vector<float> d, g;
  std::vector<Param> params{make_param("w", {1}, ParamKind::Scalar, d, g)};
  OptimConfig cfg;
  cfg.scalar = OptimGroup{.kind = "adamw", .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  cfg.scalar.weight_decay = 0.1f;
  cfg.grad_clip = 0;
  Optimizer opt(params, cfg);
  d[0] = 1.0f;
  g[0] = 0.5f;
  // Step 1: p = 1*(1 - 0.1*0.1) = 0.99; m_hat = 0.5, v_hat = 0.25 -> p -= 0.1 * 0.5/0.5 -> 0.89.
  EXPECT_FLOAT_EQ(opt.step(1.0f), 0.5f);
  EXPECT_NEAR(d[0], 0.89f, 1e-6);
  // Step 2 (g = -0.25): m = 0.02, v = 0.00031225, bc1 = 0.19, bc2 = 0.001999
  // m_hat = 0.1052632, v_hat = 0.1562031, sqrt = 0.3952253 -> p = 0.89*0.99 - 0.1*0.2663375 = 0.8544663
  g[0] = -0.25f;
  opt.step(1.0f);
  EXPECT_NEAR(d[0], 0.8544663f, 2e-6);
  // lr_scale 0 and wd_scale 0 leave the weight unchanged (but advance the moments).
  float before = d[0];
  opt.step(0.0f, 0.0f);
  EXPECT_EQ(d[0], before);
}

TEST(Optim, GlobalGradNormClipping) {
  std::vector<float> d1, g1, d2, g2;
  std::vector<Param> params{make_param("a", {2}, ParamKind::Scalar, d1, g1),
                            make_param("b", {1, 1}, ParamKind::Embedding, d2, g2)};
  OptimConfig cfg;
  cfg.scalar = OptimGroup{.kind = "adamw", .lr = 1.0f, .beta1 = 0.0f, .beta2 = 0.0f, .eps = 1e-30f};
  cfg.embed = cfg.scalar;
  cfg.grad_clip = 1.0f;
  Optimizer opt(params, cfg);
  set_to(g1, {3.0f, 0.0f});
  g2[0] = 4.0f;
  // Norm 5 > clip 1: every grad is scaled by 1/5; with beta1 = beta2 = 0 AdamW's step is sign(g)*lr.
  EXPECT_NEAR(opt.step(1.0f), 5.0f, 1e-6);
  EXPECT_NEAR(d1[0], -1.0f, 1e-5);
  EXPECT_NEAR(d2[0], -1.0f, 1e-5);
}

TEST(Optim, NonFiniteGradientSkipsTheUpdateOnTheDeviceAndReportsIt) {
  // A NaN gradient: enqueue_step writes a clip with finite = 0, and no parameter or moment of any
  // group (AdamW, Muon, NorMuon) changes. After step_not_applied() the next step is bit for bit
  // the first step of a fresh optimizer (the bias corrections' step count was taken back).
  OptimConfig cfg;
  cfg.scalar = OptimGroup{.kind = "adamw", .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f};
  cfg.embed = cfg.scalar;
  cfg.matrix = OptimGroup{.kind = "muon", .lr = 0.02f};
  cfg.head = OptimGroup{.kind = "normuon", .lr = 0.02f, .beta2 = 0.95f, .eps = 1e-8f};
  cfg.grad_clip = 1.0f;
  auto run = [&](bool nan_first, std::vector<float>& out, std::string& state) {
    std::vector<float> d[4], g[4];
    std::vector<Param> params{make_param("s", {3}, ParamKind::Scalar, d[0], g[0]),
                              make_param("e", {4, 3}, ParamKind::Embedding, d[1], g[1]),
                              make_param("m", {4, 6}, ParamKind::Matrix, d[2], g[2]),
                              make_param("h", {6, 4}, ParamKind::Head, d[3], g[3])};
    for (int i = 0; i < 4; ++i) {
      set_to(d[i], random_matrix(1, int(d[i].size()), 30 + i));
      set_to(g[i], random_matrix(1, int(g[i].size()), 40 + i));
    }
    Optimizer opt(params, cfg);
    if (nan_first) {
      const std::vector<float> before[4] = {d[0], d[1], d[2], d[3]};
      const float keep = g[2][5];
      g[2][5] = std::nanf("");
      GradClip clip;
      opt.enqueue_step(1.0f, 1.0f, -1.0f, &clip);  // CPU device memory is host memory
      EXPECT_EQ(clip.finite, 0);
      EXPECT_TRUE(std::isnan(clip.norm));
      for (int i = 0; i < 4; ++i) EXPECT_EQ(d[i], before[i]) << "group " << i;
      opt.step_not_applied();
      g[2][5] = keep;
    }
    EXPECT_TRUE(std::isfinite(opt.step(1.0f)));
    out.clear();
    for (int i = 0; i < 4; ++i) out.insert(out.end(), d[i].begin(), d[i].end());
    std::stringstream ss;
    opt.save(ss);
    state = ss.str();
  };
  std::vector<float> skipped_then_good, good;
  std::string state_a, state_b;
  run(true, skipped_then_good, state_a);
  run(false, good, state_b);
  EXPECT_EQ(skipped_then_good, good);
  EXPECT_EQ(state_a, state_b);  // moments and step counts
  // step() reports a non-finite norm and updates nothing.
  std::vector<float> d, g;
  std::vector<Param> one{make_param("w", {2}, ParamKind::Scalar, d, g)};
  Optimizer opt(one, cfg);
  set_to(d, {1.0f, 2.0f});
  set_to(g, {std::numeric_limits<float>::infinity(), 1.0f});
  EXPECT_TRUE(std::isinf(opt.step(1.0f)));
  EXPECT_EQ(d, (std::vector<float>{1.0f, 2.0f}));
}

TEST(Optim, SumSquaresIndependentOfThreads) {
  auto x = random_matrix(1, 300001, 7);
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  double a = sum_squares(x.data(), int64_t(x.size()));
  omp_set_num_threads(2);
  double b = sum_squares(x.data(), int64_t(x.size()));
  omp_set_num_threads(saved);
  EXPECT_EQ(a, b);
}

TEST(Optim, NewtonSchulzMatchesFloat64Reference) {
  NewtonSchulz ns;
  // Small shapes take the fp32 loop path, the larger ones oneDNN (bf16 or fp32).
  for (auto [rows, cols] : {std::pair{24, 40}, std::pair{40, 24}, std::pair{33, 33}, std::pair{136, 300},
                            std::pair{300, 136}}) {
    auto G = random_matrix(rows, cols, 11 + rows);
    auto ref = ns_reference(G, rows, cols, 5);
    std::vector<float> out32(G.size()), out16(G.size());
    ns.run(G.data(), out32.data(), rows, cols, NsSchedule::quintic(5), false);
    ns.run(G.data(), out16.data(), rows, cols, NsSchedule::quintic(5), true);
    double e32 = 0, e16 = 0;
    for (size_t i = 0; i < G.size(); ++i) {
      e32 = std::max(e32, std::abs(out32[i] - ref[i]));
      e16 = std::max(e16, std::abs(out16[i] - ref[i]));
    }
    EXPECT_LT(e32, 1e-4) << rows << "x" << cols;
    EXPECT_LT(e16, 3e-2) << rows << "x" << cols;  // bf16 inputs: ~3 significant digits
  }
}

TEST(Optim, NewtonSchulzSingularValuesInBand) {
  // For normalised singular values in [0.01, 1], five quintic steps land in [0.682, 1.134] (computed
  // by iterating the scalar polynomial); bf16 rounding widens that slightly.
  NewtonSchulz ns;
  for (auto [rows, cols] : {std::pair{48, 96}, std::pair{96, 48}, std::pair{160, 320}, std::pair{320, 160}}) {
    auto G = random_matrix(rows, cols, 3);
    auto sv_in = singular_values(G, rows, cols);
    double smax = *std::max_element(sv_in.begin(), sv_in.end());
    double smin = *std::min_element(sv_in.begin(), sv_in.end());
    ASSERT_GT(smin / smax, 0.05);  // well-conditioned input, so every direction gets orthogonalised
    for (bool bf16 : {false, true}) {
      std::vector<float> O(G.size());
      ns.run(G.data(), O.data(), rows, cols, NsSchedule::quintic(5), bf16);
      for (double s : singular_values(O, rows, cols)) {
        EXPECT_GT(s, bf16 ? 0.64 : 0.68) << rows << "x" << cols << " bf16=" << bf16;
        EXPECT_LT(s, bf16 ? 1.18 : 1.14) << rows << "x" << cols << " bf16=" << bf16;
      }
    }
  }
}

TEST(Optim, PolarExpressSingularValuesInTighterBand) {
  // Polar Express in the same five steps: normalised singular values in [0.001, 1] land in
  // [0.847, 1.142] (the scalar polynomials iterated, 2% margin included), against the quintic's
  // [0.47, 1.21]; bf16 rounding widens that slightly.
  NewtonSchulz ns;
  const NsSchedule pe = ns_schedule("polar", 5);
  EXPECT_FLOAT_EQ(pe.steps.front().a, 8.156554524902461f);
  EXPECT_FLOAT_EQ(pe.steps.back().c, 0.42323551169305323f);
  EXPECT_FLOAT_EQ(pe.norm_margin, 1.02f);
  for (auto [rows, cols] : {std::pair{48, 96}, std::pair{96, 48}, std::pair{160, 320}, std::pair{320, 160}}) {
    auto G = random_matrix(rows, cols, 3);
    for (bool bf16 : {false, true}) {
      std::vector<float> O(G.size());
      ns.run(G.data(), O.data(), rows, cols, pe, bf16);
      for (double s : singular_values(O, rows, cols)) {
        EXPECT_GT(s, bf16 ? 0.80 : 0.84) << rows << "x" << cols << " bf16=" << bf16;
        EXPECT_LT(s, bf16 ? 1.19 : 1.15) << rows << "x" << cols << " bf16=" << bf16;
      }
    }
  }
  EXPECT_EQ(ns_schedule("polar", 7).steps[6].a, pe.steps[4].a);  // later steps repeat the last
  EXPECT_EQ(ns_schedule("quintic", 3).steps.size(), 3u);
  EXPECT_THROW(ns_schedule("cubic", 5), Error);
}

// Muon at `lr` with fp32 Newton-Schulz and no clipping: updates comparable with a float reference.
static OptimConfig muon_fp32_unclipped(float lr) {
  OptimConfig cfg;
  cfg.matrix = OptimGroup{.kind = "muon", .lr = lr};
  cfg.matrix.ns_precision = "fp32";
  cfg.grad_clip = 0;
  return cfg;
}

TEST(Optim, MuonUpdateIsScaledOrthogonalisedMomentum) {
  const int rows = 64, cols = 32;  // tall: update scaled by sqrt(64/32)
  std::vector<float> d, g;
  std::vector<Param> params{make_param("blocks.0.mlp.w", {rows, cols}, ParamKind::Matrix, d, g)};
  OptimConfig cfg = muon_fp32_unclipped(0.1f);
  Optimizer opt(params, cfg);
  set_to(g, random_matrix(rows, cols, 5));
  opt.step(1.0f);
  // Nesterov with an empty buffer: u = g + mu*g, orthogonalised (scale-free) -> same as NS(g).
  NewtonSchulz ns;
  std::vector<float> O(g.size());
  ns.run(g.data(), O.data(), rows, cols, NsSchedule::quintic(5), false);
  const float s = 0.1f * std::sqrt(2.0f);
  for (size_t i = 0; i < d.size(); ++i) ASSERT_NEAR(d[i], -s * O[i], 1e-5);
  std::vector<float> U(d.size());
  for (size_t i = 0; i < d.size(); ++i) U[i] = -d[i] / s;
  for (double sv : singular_values(U, rows, cols)) {
    EXPECT_GT(sv, 0.68);
    EXPECT_LT(sv, 1.14);
  }
}

TEST(Optim, RoutesParamsByKind) {
  std::vector<float> d[5], g[5];
  std::vector<Param> params{make_param("wte", {64, 8}, ParamKind::Embedding, d[0], g[0]),
                            make_param("blocks.0.attn.wq", {8, 8}, ParamKind::Matrix, d[1], g[1]),
                            make_param("blocks.0.mlp.fc", {32, 8}, ParamKind::Matrix, d[2], g[2]),
                            make_param("lm_head", {64, 8}, ParamKind::Head, d[3], g[3]),
                            make_param("norm.gain", {8}, ParamKind::Scalar, d[4], g[4])};
  OptimConfig cfg;  // defaults: matrix -> muon, the rest -> adamw
  Optimizer opt(params, cfg);
  EXPECT_EQ(opt.group_of("wte"), "embed");
  EXPECT_EQ(opt.group_of("blocks.0.attn.wq"), "matrix");
  EXPECT_EQ(opt.group_of("blocks.0.mlp.fc"), "matrix");
  EXPECT_EQ(opt.group_of("lm_head"), "head");
  EXPECT_EQ(opt.group_of("norm.gain"), "scalar");
  EXPECT_THROW(opt.group_of("nope"), Error);

  // Each group moves with its own lr: zero the embed lr, only the embedding stays put.
  cfg.embed.lr = 0;
  Optimizer opt2(params, cfg);
  for (int i = 0; i < 5; ++i) {
    auto r = random_matrix(1, int(g[i].size()), 100 + i);
    set_to(g[i], r);
  }
  opt2.step(1.0f);
  for (float x : d[0]) EXPECT_EQ(x, 0.0f);
  for (int i = 1; i < 5; ++i) {
    double s = 0;
    for (float x : d[i]) s += std::abs(x);
    EXPECT_GT(s, 0) << params[i].name;
  }

  // A 1-D tensor routed to a Muon group is refused.
  OptimConfig bad;
  bad.scalar.kind = "muon";
  EXPECT_THROW(Optimizer(params, bad), Error);
}

TEST(Optim, AllAdamWConfigWorks) {
  std::vector<float> d, g;
  std::vector<Param> params{make_param("w", {16, 8}, ParamKind::Matrix, d, g)};
  OptimConfig cfg;
  cfg.matrix.kind = "adamw";
  cfg.matrix.lr = 0.01f;
  Optimizer opt(params, cfg);
  set_to(g, random_matrix(16, 8, 9));
  opt.step(1.0f);
  // First AdamW step: every element moves by lr * sign(g) (bias-corrected m/sqrt(v) = sign).
  for (size_t i = 0; i < d.size(); ++i) EXPECT_NEAR(d[i], g[i] > 0 ? -0.01f : 0.01f, 1e-5);
}

TEST(Optim, SaveLoadContinuesBitExactAndRefusesMismatch) {
  for (const char* kind : {"muon", "normuon"}) {
  SCOPED_TRACE(kind);
  auto make = [](std::vector<float>& d0, std::vector<float>& g0, std::vector<float>& d1, std::vector<float>& g1) {
    return std::vector<Param>{make_param("m", {12, 20}, ParamKind::Matrix, d0, g0),
                              make_param("e", {30, 4}, ParamKind::Embedding, d1, g1)};
  };
  std::vector<float> a0, ag0, a1, ag1, b0, bg0, b1, bg1;
  auto pa = make(a0, ag0, a1, ag1);
  auto pb = make(b0, bg0, b1, bg1);
  OptimConfig cfg;
  cfg.matrix.kind = kind;
  Optimizer A(pa, cfg);
  for (int s = 0; s < 3; ++s) {
    set_to(ag0, random_matrix(12, 20, 200 + s));
    set_to(ag1, random_matrix(30, 4, 300 + s));
    A.step(1.0f, 1.0f, 0.9f);
  }
  std::stringstream ss;
  A.save(ss);
  std::string blob = ss.str();
  Optimizer B(pb, cfg);
  std::istringstream in(blob);
  B.load(in);
  set_to(b0, a0);
  set_to(b1, a1);
  for (int s = 3; s < 6; ++s) {
    set_to(ag0, random_matrix(12, 20, 200 + s));
    set_to(bg0, random_matrix(12, 20, 200 + s));
    set_to(ag1, random_matrix(30, 4, 300 + s));
    set_to(bg1, random_matrix(30, 4, 300 + s));
    A.step(0.5f);
    B.step(0.5f);
  }
  EXPECT_EQ(a0, b0);
  EXPECT_EQ(a1, b1);

  // Truncated state, other shapes, other optimizer kind: all refused.
  std::istringstream trunc(blob.substr(0, blob.size() - 7));
  EXPECT_THROW(B.load(trunc), Error);
  std::vector<float> c0, cg0, c1, cg1;
  std::vector<Param> pc{make_param("m", {12, 21}, ParamKind::Matrix, c0, cg0),
                        make_param("e", {30, 4}, ParamKind::Embedding, c1, cg1)};
  Optimizer C(pc, cfg);
  std::istringstream in2(blob);
  EXPECT_THROW(C.load(in2), Error);
  OptimConfig adam = cfg;
  adam.matrix.kind = "adamw";
  Optimizer D(pb, adam);
  std::istringstream in3(blob);
  EXPECT_THROW(D.load(in3), Error);
  OptimConfig other = cfg;  // Muon's state for NorMuon and the reverse
  other.matrix.kind = std::string(kind) == "muon" ? "normuon" : "muon";
  Optimizer E(pb, other);
  std::istringstream in4(blob);
  EXPECT_THROW(E.load(in4), Error);
  }
}

TEST(Optim, NorMuonGivesEveryRowTheSameRmsAtMuonsNorm) {
  // First step from an empty state: the orthogonalised update O, each row divided by the root of
  // (1 - beta2) times its own mean square, then rescaled to O's Frobenius norm. So every row of the
  // update has the same RMS, and the whole update Muon's norm.
  const int rows = 48, cols = 32;
  std::vector<float> dm, gm, dn, gn;
  std::vector<Param> pm{make_param("blocks.0.mlp.w", {rows, cols}, ParamKind::Matrix, dm, gm)};
  std::vector<Param> pn{make_param("blocks.0.mlp.w", {rows, cols}, ParamKind::Matrix, dn, gn)};
  OptimConfig cfg = muon_fp32_unclipped(0.1f);
  Optimizer muon(pm, cfg);
  cfg.matrix.kind = "normuon";
  Optimizer normuon(pn, cfg);
  std::vector<float> g = random_matrix(rows, cols, 7);
  for (int r = 0; r < rows; ++r)  // rows of very different scales, so Muon's rows differ in RMS
    for (int c = 0; c < cols; ++c) g[size_t(r * cols + c)] *= 1.0f + float(r % 5);
  set_to(gm, g);
  set_to(gn, g);
  muon.step(1.0f);
  normuon.step(1.0f);
  double nm = 0, nn = 0;
  std::vector<double> rms(rows, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const double a = dm[size_t(r * cols + c)], b = dn[size_t(r * cols + c)];
      nm += a * a, nn += b * b, rms[size_t(r)] += b * b / cols;
    }
  EXPECT_NEAR(std::sqrt(nn), std::sqrt(nm), 1e-5 * std::sqrt(nm));
  const double mean_rms = std::sqrt(nn / (rows * cols));
  for (int r = 0; r < rows; ++r) EXPECT_NEAR(std::sqrt(rms[size_t(r)]), mean_rms, 1e-4 * mean_rms) << "row " << r;
  // Muon's own rows are not all alike here, so the test would fail without the normalisation.
  double lo = INFINITY, hi = 0;
  for (int r = 0; r < rows; ++r) {
    double s = 0;
    for (int c = 0; c < cols; ++c) s += double(dm[size_t(r * cols + c)]) * dm[size_t(r * cols + c)];
    lo = std::min(lo, s), hi = std::max(hi, s);
  }
  EXPECT_GT(hi / lo, 1.1);
}

TEST(Optim, NewtonSchulzDealsLargestFirstToTheLeastLoaded) {
  // Costs 5, 4, 3, 3, 3 on two threads: 5 | 4, then 3 to the 4 (7), 3 to the 5 (8), 3 to the 7.
  const auto d = NewtonSchulz::deal({3, 5, 3, 4, 3}, 2);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (std::vector<int>{1, 2}));
  EXPECT_EQ(d[1], (std::vector<int>{3, 0, 4}));
  EXPECT_EQ(NewtonSchulz::deal({1, 1}, 4).size(), 4u);  // threads may go idle
  EXPECT_TRUE(NewtonSchulz::deal({}, 2)[0].empty());
}

// run_many against run on each matrix alone, with the threaded size lowered so that both of its
// paths run: 256x512 and 512x256 alone on every thread, the rest dealt to threads one whole matrix
// each (192x192 and friends on oneDNN, 24x40 on the loop path). With two or more threads; one
// thread runs everything through run().
TEST(Optim, NewtonSchulzManyMatchesRunOnEachMatrix) {
  const int threads = omp_get_max_threads();
  if (threads < 2) omp_set_num_threads(2);
  const std::vector<std::pair<int, int>> shapes = {{192, 192}, {256, 512}, {24, 40}, {192, 768},
                                                   {768, 192}, {512, 256}, {136, 300}, {192, 192}};
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    NewtonSchulz many, one;
    many.threaded_from = int64_t(256) * 256 * 512;
    EXPECT_TRUE(many.threaded(512, 256));
    EXPECT_FALSE(many.threaded(192, 768));
    std::vector<std::vector<float>> G, out;
    std::vector<const float*> gp;
    std::vector<float*> op;
    std::vector<int64_t> rows, cols;
    for (size_t i = 0; i < shapes.size(); ++i) {
      G.push_back(random_matrix(shapes[i].first, shapes[i].second, 40 + i));
      out.emplace_back(G.back().size(), NAN);
      rows.push_back(shapes[i].first);
      cols.push_back(shapes[i].second);
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      gp.push_back(G[i].data());
      op.push_back(out[i].data());
    }
    const NsSchedule pe = NsSchedule::polar_express(5);
    many.run_many(gp.data(), op.data(), rows.data(), cols.data(), int(shapes.size()), pe, bf16);
    int same = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<float> want(G[i].size());
      one.run(G[i].data(), want.data(), rows[i], cols[i], pe, bf16);
      double m = 0, e = 0;
      for (size_t k = 0; k < want.size(); ++k) {
        m = std::max(m, double(std::abs(want[k])));
        e = std::max(e, double(std::abs(out[i][k] - want[k])));
      }
      // The bounds of BackendOps.NewtonSchulzManyMatchesOneAtATime: the matmul library's rounding.
      EXPECT_LE(e, (bf16 ? 2e-2 : 2e-6) * m) << rows[i] << "x" << cols[i];
      same += out[i] == want;
    }
    // How many came out bit-identical, for the record (oneDNN's single-thread kernels may block
    // the sums differently on another CPU).
    RecordProperty(bf16 ? "bit_identical_bf16" : "bit_identical_fp32", same);
    std::printf("[ info     ] %s: %d of %zu matrices bit-identical to run()\n", bf16 ? "bf16" : "fp32", same,
                shapes.size());
  }
  omp_set_num_threads(threads);
}

// An optimizer step with one newton_schulz_many per group equals the step with one newton_schulz
// per matrix: Muon and NorMuon over mixed shapes (loop-path and oneDNN sizes), bf16 and fp32, with
// momentum carried over three steps. Bounds: the NS ops' own (above) times lr, the only place the
// two paths can differ.
TEST(Optim, BatchedNewtonSchulzStepEqualsPerMatrixSteps) {
  const std::vector<std::pair<int, int>> shapes = {{192, 192}, {768, 192}, {192, 768}, {24, 40}, {64, 64}};
  for (const char* kind : {"muon", "normuon"})
    for (const char* prec : {"fp32", "bf16"}) {
      SCOPED_TRACE(testing::Message() << kind << " " << prec);
      std::vector<std::vector<float>> d[2], g[2];
      std::vector<Param> ps[2];
      for (int k = 0; k < 2; ++k) {
        d[k].resize(shapes.size());
        g[k].resize(shapes.size());
        for (size_t i = 0; i < shapes.size(); ++i)
          ps[k].push_back(make_param("blocks." + std::to_string(i) + ".w", {shapes[i].first, shapes[i].second},
                                     ParamKind::Matrix, d[k][i], g[k][i]));
      }
      OptimConfig cfg;
      cfg.matrix.kind = kind;
      cfg.matrix.ns_precision = prec;
      cfg.matrix.ns_coeffs = "polar";
      cfg.matrix.lr = 0.02f;
      Optimizer batched(ps[0], cfg), single(ps[1], cfg);
      single.set_batched_ns(false);
      batched.warmup();
      single.warmup();
      for (int s = 0; s < 3; ++s) {
        for (int k = 0; k < 2; ++k)
          for (size_t i = 0; i < shapes.size(); ++i)
            set_to(g[k][i], random_matrix(shapes[i].first, shapes[i].second, 500 + 10 * s + i));
        EXPECT_EQ(batched.step(1.0f, 1.0f, 0.9f), single.step(1.0f, 1.0f, 0.9f));
      }
      const double tol = (std::string(prec) == "bf16" ? 2e-2 : 2e-6) * 3 * 0.02 * 2;  // 3 steps, scale <= 2
      for (size_t i = 0; i < shapes.size(); ++i)
        for (size_t k = 0; k < d[0][i].size(); ++k)
          ASSERT_NEAR(d[0][i][k], d[1][i][k], tol) << shapes[i].first << "x" << shapes[i].second << " at " << k;
    }
}

// The optimizer table is parsed against the bytes that remain: absurd parameter or element counts,
// an unknown kind and trailing bytes are refused before anything is sized from them.
TEST(Optim, StateTableWithAbsurdSizesIsRefused) {
  auto state = [](uint32_t np, uint64_t n, uint8_t kind) {
    std::string s(kOptimStateMagic, 8);
    s.append(reinterpret_cast<const char*>(&np), 4);
    s.append(32, '\0');  // step counts
    uint32_t len = 1;
    s.append(reinterpret_cast<const char*>(&len), 4);
    s += "w";
    s += char(kind);
    s.append(reinterpret_cast<const char*>(&n), 8);
    s.append(8 * 2, '\0');  // two floats of m and v
    return s;
  };
  OptimStateTable t = parse_optim_state(state(1, 2, 0));
  ASSERT_EQ(t.params.size(), 1u);
  EXPECT_EQ(t.params[0].m.size(), 8u);
  EXPECT_THROW(parse_optim_state(state(4000000000u, 2, 0)), Error);
  EXPECT_THROW(parse_optim_state(state(1, uint64_t(1) << 62, 0)), Error);
  EXPECT_THROW(parse_optim_state(state(1, ~uint64_t(0), 0)), Error);
  EXPECT_THROW(parse_optim_state(state(1, 2, 7)), Error);
  // NorMuon: m, then u64 rows and rows floats of v. Here "rows" reads the first 8 bytes of zero m
  // (0 rows) and is refused; a valid table of 1 row parses.
  EXPECT_THROW(parse_optim_state(state(1, 2, 2)), Error);
  {
    std::string s = state(1, 2, 2).substr(0, 8 + 4 + 32 + 4 + 1 + 1 + 8 + 8);  // through m
    uint64_t rows = 1;
    s.append(reinterpret_cast<const char*>(&rows), 8);
    s.append(4, '\0');
    const OptimStateTable nt = parse_optim_state(s);
    ASSERT_EQ(nt.params.size(), 1u);
    EXPECT_TRUE(nt.params[0].normuon);
    EXPECT_EQ(nt.params[0].v.size(), 4u);
    rows = 3;  // does not divide 2 elements
    s.replace(s.size() - 12, 8, reinterpret_cast<const char*>(&rows), 8);
    EXPECT_THROW(parse_optim_state(s), Error);
  }
  EXPECT_THROW(parse_optim_state(state(1, 2, 1)), Error);  // Muon keeps one moment: bytes left over
  EXPECT_THROW(parse_optim_state(state(1, 2, 0).substr(0, 20)), Error);
}
