// The CPU kernel variants (generic, avx2, avx512; backend/cpu/cpu_features.h): selection and
// refusal, and every variant that this build compiled and this CPU runs checked against a float64
// reference (attention, RMSNorm, AdamW, sum of squares) or against the generic variant (the other
// kernels). Tolerances are stated per check; the bf16 conversions and sum_squares must give the
// same bits in every variant.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "test_num_util.h"
#include "backend/backend.h"
#include "backend/cpu/attention_select.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/optim_kernels.h"
#include "core/common.h"
#include "test_cli_util.h"

using namespace clm;
using VecD = std::vector<double>;
using VecF = std::vector<float>;

namespace {

using num_test::randn;

using num_test::to_d;
VecD to_d(const std::vector<bf16>& v) {
  VecD out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}
void append(VecD& out, const VecD& more) { out.insert(out.end(), more.begin(), more.end()); }

// Restores the variant that was active when the test started.
struct RestoreIsa {
  std::string isa = cpu_kernel_isa();
  ~RestoreIsa() { set_cpu_kernel_isa(isa); }
};

// Runs `run` under every usable variant; `check(isa, result)` compares each result.
void for_each_isa(const std::function<void(const std::string&)>& run) {
  RestoreIsa restore;
  for (const std::string& isa : cpu_kernel_isas_usable()) {
    SCOPED_TRACE("variant " + isa);
    set_cpu_kernel_isa(isa);
    ASSERT_EQ(cpu_kernel_isa(), isa);
    run(isa);
  }
}

// max |a - b| <= atol + rtol * |b| elementwise, b the reference; reports the worst element.
void expect_close(const VecD& a, const VecD& b, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double excess = std::abs(a[i] - b[i]) - (atol + rtol * std::abs(b[i]));
    if (!(excess <= worst)) {  // also catches NaN
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": element " << at << " is " << a[at] << ", reference " << b[at]
                        << " (rtol " << rtol << ", atol " << atol << ")";
}

// Runs `compute` (which returns its outputs flattened) under every usable variant and compares each
// result with the generic variant's.
void expect_variants_match_generic(const std::function<VecD()>& compute, double rtol, double atol,
                                   const std::string& what) {
  RestoreIsa restore;
  set_cpu_kernel_isa("generic");
  VecD ref = compute();
  for_each_isa([&](const std::string& isa) {
    expect_close(compute(), ref, rtol, atol, what + " (" + isa + " vs generic)");
  });
}

// --- float64 attention reference -----------------------------------------------------------------
// Forward for Tq queries at the end of Tk keys (cache stride cap), each seeing the `window` most
// recent keys (all when window <= 0); o and lse as attention_fwd.
void attn_ref_fwd(const VecF& q, const VecF& k, const VecF& v, int B, int H, int Hkv, int Tq,
                  int Tk, int cap, int hd, int window, VecD& o, VecD& lse) {
  o.assign(size_t(B) * H * Tq * hd, 0.0);
  lse.assign(size_t(B) * H * Tq, 0.0);
  const double scale = 1.0 / std::sqrt(double(hd));
  VecD s(Tk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      int kvh = h / (H / Hkv);
      const float* qb = q.data() + (size_t(b) * H + h) * Tq * hd;
      const float* kb = k.data() + (size_t(b) * Hkv + kvh) * cap * hd;
      const float* vb = v.data() + (size_t(b) * Hkv + kvh) * cap * hd;
      for (int i = 0; i < Tq; ++i) {
        int last = Tk - Tq + i, first = window > 0 ? std::max(0, last - window + 1) : 0;
        double mx = -INFINITY;
        for (int j = first; j <= last; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += double(qb[size_t(i) * hd + c]) * kb[size_t(j) * hd + c];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = first; j <= last; ++j) sum += (s[j] = std::exp(s[j] - mx));
        double* orow = o.data() + ((size_t(b) * H + h) * Tq + i) * hd;
        for (int j = first; j <= last; ++j)
          for (int c = 0; c < hd; ++c) orow[c] += s[j] / sum * vb[size_t(j) * hd + c];
        lse[(size_t(b) * H + h) * Tq + i] = mx + std::log(sum);
      }
    }
}

// Backward for Tq == Tk == T: dq, dk, dv of sum(o * dout).
void attn_ref_bwd(const VecF& q, const VecF& k, const VecF& v, const VecF& dout, int B, int H,
                  int Hkv, int T, int hd, VecD& dq, VecD& dk, VecD& dv) {
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(hd));
  VecD p(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      int kvh = h / (H / Hkv);
      size_t qoff = (size_t(b) * H + h) * T * hd, kvoff = (size_t(b) * Hkv + kvh) * T * hd;
      for (int i = 0; i < T; ++i) {
        double mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c)
            d += double(q[qoff + size_t(i) * hd + c]) * k[kvoff + size_t(j) * hd + c];
          p[j] = d * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        double rowdot = 0;  // sum_j p_j dp_j
        for (int j = 0; j <= i; ++j) {
          p[j] /= sum;
          double d = 0;
          for (int c = 0; c < hd; ++c)
            d += double(dout[qoff + size_t(i) * hd + c]) * v[kvoff + size_t(j) * hd + c];
          dp[j] = d;
          rowdot += p[j] * d;
        }
        for (int j = 0; j <= i; ++j) {
          double ds = p[j] * (dp[j] - rowdot) * scale;
          for (int c = 0; c < hd; ++c) {
            dq[qoff + size_t(i) * hd + c] += ds * k[kvoff + size_t(j) * hd + c];
            dk[kvoff + size_t(j) * hd + c] += ds * q[qoff + size_t(i) * hd + c];
            dv[kvoff + size_t(j) * hd + c] += p[j] * dout[qoff + size_t(i) * hd + c];
          }
        }
      }
    }
}

double max_abs(const VecD& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace

// -------------------------------------------------------------------------------------------------
TEST(CpuIsa, NamesVariantsAndSwitchesBetweenThem) {
  std::vector<std::string> compiled = cpu_kernel_isas_compiled(), usable = cpu_kernel_isas_usable();
  ASSERT_FALSE(compiled.empty());
  EXPECT_EQ(compiled.front(), "generic");
  ASSERT_FALSE(usable.empty());
  EXPECT_EQ(usable.front(), "generic");
  for (const std::string& u : usable)
    EXPECT_NE(std::find(compiled.begin(), compiled.end(), u), compiled.end()) << u;
  const CpuFeatures& f = cpu_features();
  bool avx2_ok = f.avx2 && f.fma;
  bool avx512_ok = avx2_ok && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  RestoreIsa restore;
  for (std::string isa : {"generic", "avx2", "avx512"}) {
    bool is_compiled = std::find(compiled.begin(), compiled.end(), isa) != compiled.end();
    bool runs = isa == "generic" || (isa == "avx2" ? avx2_ok : avx512_ok);
    if (is_compiled && runs) {
      EXPECT_NE(std::find(usable.begin(), usable.end(), isa), usable.end()) << isa;
      set_cpu_kernel_isa(isa);
      EXPECT_EQ(cpu_kernel_isa(), isa);
    } else {
      try {
        set_cpu_kernel_isa(isa);
        ADD_FAILURE() << isa << " was accepted though "
                      << (is_compiled ? "unsupported" : "not compiled");
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(is_compiled ? "lacks" : "not compiled"),
                  std::string::npos)
            << e.what();
      }
    }
  }
  EXPECT_THROW(set_cpu_kernel_isa("sse9"), Error);
  EXPECT_THROW(set_cpu_kernel_isa(""), Error);
}

TEST(CpuIsa, EnvironmentVariableForcesOrRefusesAVariant) {
  // The binary selects its variant at the first kernel call; `bench attention` makes one.
  const std::string bench = "bench attention --batch 1 --heads 2 --seq 70 --head-dim 16 --reps 1";
  for (const std::string& isa : cpu_kernel_isas_usable()) {
    cli_test::CmdResult r =
        cli_test::run_cmd("CLOCKLM_CPU_ISA=" + isa + " " + CLOCKLM_BINARY + " " + bench);
    EXPECT_EQ(r.status, 0) << isa << ": " << r.out;
  }
  cli_test::CmdResult r =
      cli_test::run_cmd("CLOCKLM_CPU_ISA=avx1024 " + std::string(CLOCKLM_BINARY) + " " + bench);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("CLOCKLM_CPU_ISA=avx1024: unknown CPU kernel variant"), std::string::npos)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;  // one line
  std::vector<std::string> usable = cpu_kernel_isas_usable();
  for (std::string isa : {"avx2", "avx512"}) {
    if (std::find(usable.begin(), usable.end(), isa) != usable.end()) continue;
    r = cli_test::run_cmd("CLOCKLM_CPU_ISA=" + isa + " " + CLOCKLM_BINARY + " " + bench);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("CLOCKLM_CPU_ISA=" + isa + ": "), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}

TEST(CpuIsa, BinaryUsesAvxOnlyInsideTheKernelVariants) {
  // What makes the binary run on any x86-64 CPU: AVX (VEX/EVEX-encoded, mnemonics v...) code only
  // in the avx2 and avx512 variants, which run only after the CPU was checked.
#if !defined(__x86_64__) || defined(__AVX__)
  GTEST_SKIP() << "not an x86-64 build, or everything is built for AVX (-march=native)";
#else
  cli_test::CmdResult r =
      cli_test::run_cmd(std::string("objdump -d --no-show-raw-insn -C ") + CLOCKLM_BINARY);
  if (r.status != 0) GTEST_SKIP() << "objdump failed: " << r.out.substr(0, 200);
  std::string fn, bad;
  int nbad = 0, in_variants = 0;
  size_t pos = 0;
  while (pos < r.out.size()) {
    size_t end = r.out.find('\n', pos);
    if (end == std::string::npos) end = r.out.size();
    std::string_view line(r.out.data() + pos, end - pos);
    pos = end + 1;
    if (line.size() > 2 && line.substr(line.size() - 2) == ">:") {
      fn = std::string(line);
      continue;
    }
    size_t tab = line.find(":\t");
    if (tab == std::string_view::npos || tab + 2 >= line.size() || line[tab + 2] != 'v') continue;
    if (fn.find("isa_avx2::") != std::string::npos ||
        fn.find("isa_avx512::") != std::string::npos) {
      ++in_variants;
      continue;
    }
    if (nbad++ < 5) bad += "\n  " + fn + "  " + std::string(line);
  }
  EXPECT_EQ(nbad, 0) << "AVX instructions outside the kernel variants:" << bad;
  std::vector<std::string> compiled = cpu_kernel_isas_compiled();
  if (compiled.size() > 1) EXPECT_GT(in_variants, 0);  // the scan did see the variants' code
#endif
}

// -------------------------------------------------------------------------------------------------
struct IsaAttnCase {
  int B, H, Hkv, Tq, Tk, cap, hd;
  int window = 0;
};

TEST(CpuIsa, AttentionForwardAgainstFloat64) {
  // Full causal (Tq == Tk), and queries at the end of a longer KV cache (Tq < Tk <= cap), with
  // head_dim 32/64/128 (register-blocked path), 24 (plain-loop path), and grouped-query heads;
  // sliding windows (the visible keys of a tile then start past its first key: each variant's
  // masked maximum). Tolerance: 2e-5 absolute on o (|o| <= ~3) and on lse, as test_ops.cpp.
  const IsaAttnCase cases[] = {{2, 4, 2, 130, 130, 130, 32},  {1, 2, 2, 67, 67, 67, 64},
                               {1, 4, 1, 129, 129, 129, 128}, {1, 3, 1, 70, 70, 70, 24},
                               {2, 4, 2, 5, 133, 150, 64},    {1, 2, 1, 70, 200, 210, 32},
                               {1, 2, 2, 1, 77, 77, 128},     {1, 2, 1, 150, 150, 150, 32, 37},
                               {1, 2, 2, 20, 180, 190, 64, 70}, {1, 1, 1, 66, 66, 66, 24, 3}};
  for (const IsaAttnCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "B" << c.B << " H" << c.H << " Hkv" << c.Hkv << " Tq" << c.Tq
                                    << " Tk" << c.Tk << " cap" << c.cap << " hd" << c.hd << " window "
                                    << c.window);
    VecF q = randn(size_t(c.B) * c.H * c.Tq * c.hd, 11, 1.5f);
    VecF k = randn(size_t(c.B) * c.Hkv * c.cap * c.hd, 12, 1.5f);
    VecF v = randn(k.size(), 13);
    VecD oref, lref;
    attn_ref_fwd(q, k, v, c.B, c.H, c.Hkv, c.Tq, c.Tk, c.cap, c.hd, c.window, oref, lref);
    for_each_isa([&](const std::string&) {
      VecF o(q.size()), lse(size_t(c.B) * c.H * c.Tq);
      attention_fwd(q.data(), k.data(), v.data(), o.data(), lse.data(), c.B, c.H, c.Hkv, c.Tq, c.Tk,
                    c.cap, c.hd, c.window);
      expect_close(to_d(o), oref, 0, 2e-5, "o");
      expect_close(to_d(lse), lref, 0, 2e-5, "lse");
    });
  }
}

TEST(CpuIsa, AttentionBackwardAgainstFloat64) {
  // Tolerance: 1e-4 * max(1, max |reference gradient|) absolute.
  const IsaAttnCase cases[] = {{1, 4, 2, 130, 130, 130, 32},
                               {2, 2, 2, 67, 67, 67, 64},
                               {1, 4, 1, 100, 100, 100, 128},
                               {1, 3, 1, 70, 70, 70, 24}};
  for (const IsaAttnCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "B" << c.B << " H" << c.H << " Hkv" << c.Hkv << " T" << c.Tq << " hd" << c.hd);
    int T = c.Tq;
    VecF q = randn(size_t(c.B) * c.H * T * c.hd, 21, 1.5f);
    VecF k = randn(size_t(c.B) * c.Hkv * T * c.hd, 22, 1.5f);
    VecF v = randn(k.size(), 23), dout = randn(q.size(), 24);
    VecD dqr, dkr, dvr;
    attn_ref_bwd(q, k, v, dout, c.B, c.H, c.Hkv, T, c.hd, dqr, dkr, dvr);
    for_each_isa([&](const std::string&) {
      VecF o(q.size()), lse(size_t(c.B) * c.H * T), dq(q.size()), dk(k.size()), dv(v.size());
      attention_fwd(q.data(), k.data(), v.data(), o.data(), lse.data(), c.B, c.H, c.Hkv, T, T, T,
                    c.hd, 0);
      attention_bwd(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                    dk.data(), dv.data(), c.B, c.H, c.Hkv, T, c.hd, 0);
      expect_close(to_d(dq), dqr, 0, 1e-4 * std::max(1.0, max_abs(dqr)), "dq");
      expect_close(to_d(dk), dkr, 0, 1e-4 * std::max(1.0, max_abs(dkr)), "dk");
      expect_close(to_d(dv), dvr, 0, 1e-4 * std::max(1.0, max_abs(dvr)), "dv");
    });
  }
}

// -------------------------------------------------------------------------------------------------
namespace {

// One attention forward and backward through the CPU backend at matmul precision `prec` on
// `threads` threads: o, lse, dq, dk, dv concatenated.
VecF backend_attention(Backend& be, MatPrec prec, int threads) {
  const int B = 2, H = 4, Hkv = 2, T = 150, hd = 32, window = 0;
  const VecF q = randn(size_t(B) * H * T * hd, 31, 1.5f), k = randn(size_t(B) * Hkv * T * hd, 32, 1.5f);
  const VecF v = randn(k.size(), 33), dout = randn(q.size(), 34);
  VecF o(q.size()), lse(size_t(B) * H * T), dq(q.size()), dk(k.size()), dv(k.size());
  be.set_threads(threads);
  const HeadShape hs{.B = B, .H = H, .Hkv = Hkv, .hd = hd};
  be.attention_fwd({.shape = hs, .Tq = T, .Tk = T, .Tk_cap = T, .window = window, .prec = prec,
                    .q = q.data(), .k = k.data(), .v = v.data(), .o = o.data(), .lse = lse.data()});
  be.attention_bwd({.shape = hs, .T = T, .window = window, .prec = prec, .q = q.data(), .k = k.data(),
                    .v = v.data(), .o = o.data(), .lse = lse.data(), .dout = dout.data(), .dq = dq.data(),
                    .dk = dk.data(), .dv = dv.data()});
  VecF out = o;
  for (const VecF* x : {&lse, &dq, &dk, &dv}) out.insert(out.end(), x->begin(), x->end());
  return out;
}

bool same_bits(const VecF& a, const VecF& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// bf16 precision takes the bf16 attention exactly where the variant has it (avx512 on a CPU with
// AVX512_BF16); elsewhere it runs the fp32 kernel, bit for bit. The bf16 kernel gives the same bits
// on 1, 2 and 3 threads (resume and rank counts rely on it), and differs from the fp32 one (so it
// did run). The accuracy of both is checked in test_backend_ops.cpp (BackendAttention).
TEST(CpuIsa, Bf16AttentionOnlyWhereSupportedAndDeterministic) {
  ASSERT_EQ(parse_cpu_attention_mode("fp32", "x"), CpuAttnMode::Fp32);
  EXPECT_THROW(parse_cpu_attention_mode("bf8", "x"), Error);
  if (cpu_attention_mode_from_env() == CpuAttnMode::Fp32) GTEST_SKIP() << "CLOCKLM_CPU_ATTENTION=fp32";
  std::shared_ptr<Backend> be = make_backend("cpu");
  const int threads = default_threads();
  for_each_isa([&](const std::string& isa) {
    const bool has = isa == "avx512" && cpu_features().avx512bf16;
    EXPECT_EQ(attention_bf16_available(), has);
    EXPECT_EQ(cpu_attention_uses_bf16(CpuAttnMode::Auto, MatPrec::BF16), has);
    EXPECT_FALSE(cpu_attention_uses_bf16(CpuAttnMode::Auto, MatPrec::F32));
    EXPECT_FALSE(cpu_attention_uses_bf16(CpuAttnMode::Fp32, MatPrec::BF16));
    const VecF fp32 = backend_attention(*be, MatPrec::F32, 2);
    const VecF bf16 = backend_attention(*be, MatPrec::BF16, 2);
    if (!has) {
      EXPECT_TRUE(same_bits(bf16, fp32));
      EXPECT_THROW(attention_fwd_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 1, 1, 1, 8, 0),
                   Error);
      return;
    }
    EXPECT_FALSE(same_bits(bf16, fp32));
    EXPECT_TRUE(same_bits(backend_attention(*be, MatPrec::BF16, 1), bf16));
    EXPECT_TRUE(same_bits(backend_attention(*be, MatPrec::BF16, 3), bf16));
    EXPECT_TRUE(same_bits(backend_attention(*be, MatPrec::BF16, 2), bf16));  // run to run
  });
  be->set_threads(threads);
}

TEST(CpuIsa, RmsNormAgainstFloat64AndGeneric) {
  const int64_t rows = 37, C = 301;  // C not a multiple of any vector width
  const float eps = 1e-5f;
  VecF x = randn(rows * C, 31), g = randn(C, 32), dy = randn(rows * C, 33);
  // Forward against float64: 1e-5 relative + 1e-6 absolute.
  VecD yref(rows * C);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += double(x[r * C + c]) * x[r * C + c];
    double s = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t c = 0; c < C; ++c) yref[r * C + c] = x[r * C + c] * s * g[c];
  }
  for_each_isa([&](const std::string&) {
    VecF y(rows * C), rstd(rows);
    rmsnorm_fwd(x.data(), g.data(), y.data(), rstd.data(), rows, C, eps);
    expect_close(to_d(y), yref, 1e-5, 1e-6, "rmsnorm y");
    std::vector<bf16> yb(rows * C);
    rmsnorm_fwd(x.data(), g.data(), yb.data(), rstd.data(), rows, C, eps);
    expect_close(to_d(yb), yref, 1.0 / 128, 1e-6, "rmsnorm bf16 y");  // one bf16 rounding
  });
  // Backward (dx accumulates, dg accumulates) against generic: 1e-5 relative + 1e-5 absolute.
  for (bool with_gain : {true, false})
    expect_variants_match_generic(
        [&] {
          VecF y(rows * C), rstd(rows), dx(rows * C, 0.5f), dg(C, 0.25f);
          const float* gp = with_gain ? g.data() : nullptr;
          rmsnorm_fwd(x.data(), gp, y.data(), rstd.data(), rows, C, eps);
          rmsnorm_bwd({.rows = rows, .C = C, .x = x.data(), .g = gp, .rstd = rstd.data(), .dy = dy.data(),
                       .dx = dx.data(), .dg = with_gain ? dg.data() : nullptr});
          VecD out = to_d(dx);
          append(out, to_d(dg));
          append(out, to_d(rstd));
          return out;
        },
        1e-5, 1e-5, with_gain ? "rmsnorm bwd" : "rmsnorm bwd without gain");
}

TEST(CpuIsa, QkvHeadsForwardBackwardMatchGeneric) {
  // Tolerance against generic: 1e-5 relative + 1e-6 absolute (fp32 outputs), one bf16 step (bf16).
  const int B = 2, T = 19, H = 4, Hkv = 2;
  for (int hd : {32, 64, 128})
    for (bool qk_norm : {false, true}) {
      SCOPED_TRACE(testing::Message() << "hd " << hd << " qk_norm " << qk_norm);
      const int64_t N = int64_t(B) * T, ld = int64_t(H + 2 * Hkv) * hd;
      VecF qkv = randn(N * ld, 41), qg = randn(hd, 42), kg = randn(hd, 43);
      VecF cos_t(size_t(T) * hd / 2), sin_t(cos_t.size());
      rope_tables(cos_t.data(), sin_t.data(), T, hd, 10000.0f);
      VecF dq = randn(size_t(B) * H * T * hd, 44), dk = randn(size_t(B) * Hkv * T * hd, 45),
           dv = randn(dk.size(), 46);
      for (bool bf16_out : {false, true})
        expect_variants_match_generic(
            [&] {
              VecF qraw(dq.size()), kraw(dk.size()), qr(size_t(B) * H * T), kr(size_t(B) * Hkv * T);
              VecF q(dq.size()), k(dk.size()), v(dk.size());
              qkv_heads_fwd(qkv.data(), nullptr, nullptr, B, T, H, Hkv, hd, qk_norm, qg.data(), kg.data(), 1e-5f,
                            cos_t.data(), sin_t.data(), qraw.data(), kraw.data(), qr.data(),
                            kr.data(), q.data(), k.data(), v.data());
              VecF dqg(hd, 0.0f), dkg(hd, 0.0f);
              VecD out = to_d(q);
              append(out, to_d(k));
              append(out, to_d(v));
              if (bf16_out) {
                std::vector<bf16> dqkv(N * ld);
                qkv_heads_bwd(dq.data(), dk.data(), dv.data(), qraw.data(), kraw.data(), qr.data(),
                              kr.data(), qg.data(), kg.data(), dqg.data(), dkg.data(), B, T, H, Hkv,
                              hd, qk_norm, cos_t.data(), sin_t.data(), dqkv.data());
                append(out, to_d(dqkv));
              } else {
                VecF dqkv(N * ld);
                qkv_heads_bwd(dq.data(), dk.data(), dv.data(), qraw.data(), kraw.data(), qr.data(),
                              kr.data(), qg.data(), kg.data(), dqg.data(), dkg.data(), B, T, H, Hkv,
                              hd, qk_norm, cos_t.data(), sin_t.data(), dqkv.data());
                append(out, to_d(dqkv));
              }
              append(out, to_d(dqg));
              append(out, to_d(dkg));
              return out;
            },
            bf16_out ? 1.0 / 128 : 1e-5, 1e-5, bf16_out ? "qkv_heads (bf16 dqkv)" : "qkv_heads");
    }
}

TEST(CpuIsa, ActivationsMatchGeneric) {
  // fp32 outputs: 1e-5 relative + 1e-6 absolute; bf16 outputs: one bf16 step (1/128 relative).
  const int64_t N = 9, Hd = 301, n = N * 2 * Hd;
  VecF x = randn(n, 51, 2.0f), dy = randn(n, 52);
  for (bool bf : {false, true}) {
    double rtol = bf ? 1.0 / 128 : 1e-5;
    auto run = [&](auto fwd, auto bwd, int64_t out_n) {
      return [&, fwd, bwd, out_n] {
        VecD out;
        if (bf) {
          std::vector<bf16> y(out_n), dx(n);
          fwd(y.data());
          bwd(dx.data());
          out = to_d(y);
          append(out, to_d(dx));
        } else {
          VecF y(out_n), dx(n);
          fwd(y.data());
          bwd(dx.data());
          out = to_d(y);
          append(out, to_d(dx));
        }
        return out;
      };
    };
    expect_variants_match_generic(run([&](auto* y) { relu2_fwd(x.data(), y, n); },
                                      [&](auto* dx) { relu2_bwd(x.data(), dy.data(), dx, n); }, n),
                                  rtol, 1e-6, bf ? "relu2 bf16" : "relu2");
    expect_variants_match_generic(run([&](auto* y) { gelu_fwd(x.data(), y, n); },
                                      [&](auto* dx) { gelu_bwd(x.data(), dy.data(), dx, n); }, n),
                                  rtol, 1e-6, bf ? "gelu bf16" : "gelu");
    expect_variants_match_generic(
        run([&](auto* y) { swiglu_fwd(x.data(), y, N, Hd); },
            [&](auto* dx) { swiglu_bwd(x.data(), dy.data(), dx, N, Hd); }, N * Hd),
        rtol, 1e-6, bf ? "swiglu bf16" : "swiglu");
  }
}

TEST(CpuIsa, SoftcapCrossEntropyMatchesGeneric) {
  // Loss per row: 1e-5 relative; gradient: 1e-4 relative + 1e-8 absolute (entries ~1/V).
  const int64_t N = 13;
  const int V = 517, Vp = 528;
  VecF z = randn(N * Vp, 61, 3.0f);
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = i == 4 ? -1 : int32_t((i * 131) % V);
  for (float cap : {0.0f, 15.0f}) {
    std::string what = cap > 0 ? "softcap_xent cap 15" : "softcap_xent uncapped";
    RestoreIsa restore;
    set_cpu_kernel_isa("generic");
    VecF gz = z, gloss(N);
    std::vector<int32_t> gam(N);
    double gtotal =
        softcap_xent(gz.data(), tg.data(), N, V, Vp, Vp, cap, gloss.data(), gam.data(), true, 0.5f);
    VecF gs = z;
    softcap_fwd(gs.data(), int64_t(gs.size()), cap);
    for_each_isa([&](const std::string&) {
      VecF lz = z, loss(N), hz = z, hloss(N);
      std::vector<int32_t> am(N);
      double total = softcap_xent(lz.data(), tg.data(), N, V, Vp, Vp, cap, loss.data(), am.data(), true, 0.5f);
      // With grad_bf16 the gradient goes there only: the fp32 one rounded, the same losses.
      std::vector<bf16> gh(size_t(N * Vp), 0x7fc0);
      EXPECT_EQ(softcap_xent(hz.data(), tg.data(), N, V, Vp, Vp, cap, hloss.data(), nullptr, true, 0.5f, gh.data()),
                total) << what;
      EXPECT_EQ(hloss, loss) << what;
      for (size_t i = 0; i < gh.size(); ++i) ASSERT_EQ(gh[i], f32_to_bf16(lz[i])) << what << " bf16 gradient " << i;
      EXPECT_NEAR(total, gtotal, 1e-5 * std::abs(gtotal)) << what;
      expect_close(to_d(loss), to_d(gloss), 1e-5, 1e-6, what + " loss");
      expect_close(to_d(lz), to_d(gz), 1e-4, 1e-8, what + " gradient");
      EXPECT_EQ(am, gam) << what;
      VecF s = z;
      softcap_fwd(s.data(), int64_t(s.size()),
                  cap);  // softcap alone: 1e-6 relative + 1e-6 absolute
      expect_close(to_d(s), to_d(gs), 1e-6, 1e-6, what + " softcap_fwd");
    });
  }
}

// -------------------------------------------------------------------------------------------------
TEST(CpuIsa, TanhAgainstFloat64InEveryVariant) {
  // vtanh through softcap_fwd with cap 1 (s = tanh(z) exactly as computed), every 61st float in
  // [-12, 12]: 2e-7 absolute and 3e-7 relative (tests/test_vmath.cpp: the generic code alone).
  VecF x;
  for (uint32_t u = 0; u <= 0x41400000u; u += 61) {  // 0x41400000 = 12.0f
    float v;
    std::memcpy(&v, &u, 4);
    x.push_back(v);
    x.push_back(-v);
  }
  VecD ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = std::tanh(double(x[i]));
  for_each_isa([&](const std::string& isa) {
    VecF t = x;
    softcap_fwd(t.data(), int64_t(t.size()), 1.0f);
    double worst_abs = 0, worst_rel = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      const double e = std::abs(t[i] - ref[i]);
      const double re = ref[i] != 0 ? e / std::abs(ref[i]) : e;
      if (!(e <= worst_abs)) worst_abs = e;  // a NaN counts as the worst
      if (!(re <= worst_rel)) worst_rel = re;
    }
    EXPECT_LE(worst_abs, 2e-7) << isa;
    EXPECT_LE(worst_rel, 3e-7) << isa;
  });
}

TEST(CpuIsa, Bf16ConversionsAreBitIdenticalInEveryVariant) {
  // Special values, every denormal class, ties, and random bit patterns; n > 32768 and not a
  // multiple of 16 so the threaded path and the tail both run. Reference: the scalar conversion.
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0xffc00001u, 0x7f800001u, 0x7fbfffffu, 0xff800123u, 0x00000001u,
                                0x80000001u, 0x007fffffu, 0x807fffffu, 0x00008000u, 0x00018000u,
                                0x00400000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
                                0xff7fffffu, 0x7f7f8000u, 0x00800000u, 0x33800000u};
  Rng r(71);
  while (bits.size() < 70001) {
    uint32_t u = uint32_t(r.next());
    if (bits.size() % 3 == 0) u &= 0x807fffffu;  // many denormals
    bits.push_back(u);
  }
  VecF x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * 4);
  std::vector<bf16> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = f32_to_bf16(x[i]);
  std::vector<bf16> hb(x.size());
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = bf16(r.next());
  std::vector<uint32_t> back_ref(hb.size());
  for (size_t i = 0; i < hb.size(); ++i) back_ref[i] = uint32_t(hb[i]) << 16;
  for_each_isa([&](const std::string&) {
    for (int64_t n : {int64_t(x.size()), int64_t(1000), int64_t(15)}) {
      std::vector<bf16> y(n, 0xdead);
      f32_to_bf16(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(y[i], ref[i]) << "n " << n << " input 0x" << std::hex << bits[i];
      VecF back(n);
      bf16_to_f32(hb.data(), back.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, &back[i], 4);
        ASSERT_EQ(u, back_ref[i]) << "n " << n << " bf16 0x" << std::hex << hb[i];
      }
    }
  });
}

TEST(CpuIsa, SumSquaresIsBitIdenticalInEveryVariant) {
  // Same bits in every variant; against a float64 sum: 1e-10 relative.
  VecF x = randn(100003, 81, 3.0f);
  for (int64_t n : {int64_t(x.size()), int64_t(16384 * 5 + 7), int64_t(31), int64_t(0)}) {
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += double(x[i]) * x[i];
    RestoreIsa restore;
    set_cpu_kernel_isa("generic");
    double generic = sum_squares(x.data(), n);
    for_each_isa([&](const std::string&) {
      double s = sum_squares(x.data(), n);
      EXPECT_EQ(s, generic) << "n " << n;
      EXPECT_NEAR(s, ref, 1e-10 * ref) << "n " << n;
    });
  }
}

TEST(CpuIsa, OptimizerKernelsAgainstFloat64) {
  // AdamW and Muon's momentum/apply against float64 versions of their formulas: 1e-5 relative +
  // 1e-6 absolute. n above the threading threshold and not a multiple of any vector width.
  const int64_t n = (1 << 16) + 13;
  VecF p0 = randn(n, 91), g = randn(n, 92, 0.1f), m0 = randn(n, 93, 0.01f),
       v0 = randn(n, 94, 0.01f);
  for (auto& x : v0) x = x * x;
  const float gscale = 0.7f, lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const int64_t t = 3;
  VecD pref(n), mref(n), vref(n), pcref(n);  // pcref: cautious weight decay
  {
    double bc1 = 1 - std::pow(double(b1), double(t)), bc2 = 1 - std::pow(double(b2), double(t));
    for (int64_t i = 0; i < n; ++i) {
      double gi = double(g[i]) * gscale;
      mref[i] = b1 * double(m0[i]) + (1 - double(b1)) * gi;
      vref[i] = b2 * double(v0[i]) + (1 - double(b2)) * gi * gi;
      pref[i] = double(p0[i]) * (1 - double(lr) * wd) -
                lr * (mref[i] / bc1) / (std::sqrt(vref[i] / bc2) + eps);
      pcref[i] = double(p0[i]) * (mref[i] * p0[i] > 0 ? 1 - double(lr) * wd : 1.0) -
                 lr * (mref[i] / bc1) / (std::sqrt(vref[i] / bc2) + eps);
    }
  }
  const float mu = 0.95f, scale = 0.2f;
  VecD bufref(n), uref(n), paref(n), pacref(n);
  for (int64_t i = 0; i < n; ++i) {
    double gi = double(g[i]) * gscale;
    bufref[i] = mu * double(m0[i]) + gi;
    uref[i] = gi + mu * bufref[i];  // nesterov
    paref[i] = double(p0[i]) * (1 - double(lr) * wd) - double(lr) * scale * uref[i];
    pacref[i] = double(p0[i]) * (uref[i] * p0[i] > 0 ? 1 - double(lr) * wd : 1.0) - double(lr) * scale * uref[i];
  }
  // NorMuon's reference on u: each row scaled by f / (sqrt(0.05 ms_r) + eps), f keeping the norm.
  const int64_t nrows = 11;  // divides n
  VecD normref(uref);
  {
    const int64_t cols = n / nrows;
    double before = 0, after = 0;
    VecD d(static_cast<size_t>(nrows), 0.0);
    for (int64_t r = 0; r < nrows; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < cols; ++c) ss += uref[size_t(r * cols + c)] * uref[size_t(r * cols + c)];
      d[size_t(r)] = std::sqrt(0.05 * ss / double(cols)) + 1e-8;
      before += ss, after += ss / (d[size_t(r)] * d[size_t(r)]);
    }
    for (int64_t r = 0; r < nrows; ++r)
      for (int64_t c = 0; c < cols; ++c) normref[size_t(r * cols + c)] *= std::sqrt(before / after) / d[size_t(r)];
  }
  for_each_isa([&](const std::string&) {
    VecF p = p0, m = m0, v = v0;
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, gscale, lr, b1, b2, eps, wd, t, false);
    expect_close(to_d(m), mref, 1e-5, 1e-6, "adamw m");
    expect_close(to_d(v), vref, 1e-5, 1e-6, "adamw v");
    expect_close(to_d(p), pref, 1e-5, 1e-6, "adamw p");
    VecF pc = p0, mc = m0, vc = v0;
    adamw_update(pc.data(), g.data(), mc.data(), vc.data(), n, gscale, lr, b1, b2, eps, wd, t, true);
    expect_close(to_d(pc), pcref, 1e-5, 1e-6, "adamw p, cautious");
    VecF buf = m0, u(n), pa = p0;
    const GradClip clip{.gscale = gscale};  // CPU device memory is host memory
    const GroupStep gs{.lr = lr, .wd = wd, .mu = mu};
    muon_momentum({.n = n, .grad = g.data(), .clip = &clip, .step = &gs, .nesterov = true, .buf = buf.data(),
                   .u = u.data()});
    expect_close(to_d(buf), bufref, 1e-5, 1e-6, "muon buf");
    expect_close(to_d(u), uref, 1e-5, 1e-6, "muon u");
    VecF pac = p0;
    muon_apply({.n = n, .p = pa.data(), .o = u.data(), .clip = &clip, .step = &gs, .scale = scale, .cautious = false});
    expect_close(to_d(pa), paref, 1e-5, 1e-6, "muon apply");
    muon_apply({.n = n, .p = pac.data(), .o = u.data(), .clip = &clip, .step = &gs, .scale = scale, .cautious = true});
    expect_close(to_d(pac), pacref, 1e-5, 1e-6, "muon apply, cautious");
    // NorMuon's row normalisation of u as a [rows, n / rows] matrix, from v = 0.
    VecF un = u, vn(size_t(nrows), 0.0f);
    normuon_scale({.rows = nrows, .cols = n / nrows, .o = un.data(), .v = vn.data(), .beta2 = 0.95f, .eps = 1e-8f,
                   .clip = &clip});
    expect_close(to_d(un), normref, 1e-6, 1e-5, "normuon");

  });
}
