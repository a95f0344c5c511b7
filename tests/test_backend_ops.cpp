// Backend op tests ("test-backend-ops"): every op of the Backend interface, on every backend this
// machine has (available_backends()), through device memory only: inputs go up with to_device,
// results come back with to_host. Forward results are compared with float64 references, backward
// results with central finite differences of those references, on odd shapes (not multiples of any
// tile). The CPU backend is the reference implementation; another backend must pass the same tests.
// The attention ops run once more per GPU: once per CUDA attention implementation (fp32, gemm, cudnn),
// and on the CPU once more with bf16 precision where its bf16 attention exists (AVX512_BF16).
//
// Outputs an op overwrites (=) start as NaN, so an element it forgets to write, or adds into,
// shows; outputs it adds into (+=) start at known values that the references include.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_num_util.h"
#include "backend/backend.h"
#include "backend/cpu/attention_select.h"
#include "backend/cuda/cudnn_loader.h"
#include "backend/cuda/device.h"
#include "core/common.h"

using namespace clm;
using VecD = std::vector<double>;
using VecF = std::vector<float>;
using VecI = std::vector<int32_t>;
using VecH = std::vector<bf16>;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr bf16 kBf16NaN = 0x7fc0;
// Rounding to bf16 keeps 8 significant bits, so it moves a value v by at most half an ulp, which
// is at most 2^-8 |v|. Every bf16 output is allowed that on top of its fp32 tolerance.
constexpr double kBf16Rel = 1.0 / 256;
constexpr double kU32 = 1.0 / (1 << 24);  // fp32 unit roundoff

// ---- host data ---------------------------------------------------------------------------------
using num_test::randn;
using num_test::to_d;
VecF widen(const VecH& v) {
  VecF out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}
VecH bf16_bits(const VecF& v) {
  VecH out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}
VecF round_bf16(const VecF& v) { return widen(bf16_bits(v)); }
double dot(const VecD& a, const VecF& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// ---- device data ---------------------------------------------------------------------------------
// A device copy of a host vector: allocated and uploaded on construction, read back with get().
template <typename T>
class Dev {
 public:
  Dev(Backend& be, const std::vector<T>& host)
      : be_(&be), n_(host.size()), buf_(be, std::max<size_t>(n_, 1) * sizeof(T)) {
    be.to_device(buf_.as<void>(), host.data(), n_ * sizeof(T));
  }
  T* p() const { return buf_.as<T>(); }
  size_t size() const { return n_; }
  std::vector<T> get() const {
    std::vector<T> h(n_);
    be_->to_host(h.data(), buf_.as<void>(), n_ * sizeof(T));
    return h;
  }

 private:
  Backend* be_;
  size_t n_;
  DeviceBuffer buf_;
};

// An output that starts as NaN, for ops that overwrite it.
Dev<float> nan_out(Backend& be, size_t n) { return Dev<float>(be, VecF(n, kNaN)); }

// Runs `op` on an n-element output of dtype `t` (F32 or BF16, starting as NaN) and returns the
// result as fp32.
VecF run_with_output(Backend& be, DType t, size_t n, const std::function<void(void*)>& op) {
  if (t == DType::BF16) {
    Dev<bf16> y(be, VecH(n, kBf16NaN));
    op(y.p());
    return widen(y.get());
  }
  Dev<float> y = nan_out(be, n);
  op(y.p());
  return y.get();
}

// ---- comparisons -------------------------------------------------------------------------------
// |got[i] - ref[i]| <= abs + rel * scale[i] for every i (scale = |ref| unless given); reports the
// worst element. NaN never passes.
void expect_close(const VecF& got, const VecD& ref, double abs, double rel, const std::string& what,
                  const VecD* scale = nullptr) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double s = scale ? (*scale)[i] : std::abs(ref[i]);
    double e = std::abs(double(got[i]) - ref[i]) / (abs + rel * s);
    if (std::isnan(e)) e = INFINITY;
    if (e > worst) {
      worst = e;
      wi = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << wi << " is " << got[wi] << ", want " << ref[wi]
                        << " (tolerance " << abs << " + " << rel << " * scale)";
}

template <typename T>
void expect_same(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
        << what << ": element " << i << " is " << got[i] << ", want " << want[i];
}

// Backward check. `loss` is the float64 reference of sum(op output * R) as a function of one input
// x, so its gradient is what the op's backward must return for x. Central differences at `samples`
// coordinates (all when samples <= 0) must match `grad` within tol * max(1, max |fd|), plus
// rel_extra * |fd| (kBf16Rel for a backward that writes bf16).
void check_grad(const std::function<double(const VecD&)>& loss, const VecF& x, const VecF& grad,
                double tol, int samples, const std::string& what, double rel_extra = 0) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  VecD xd = to_d(x);
  Rng pick(99);
  const size_t n = x.size();
  const size_t m = samples <= 0 ? n : size_t(samples);
  std::vector<size_t> idx(m);
  VecD fd(m);
  double max_g = 0;
  for (size_t s = 0; s < m; ++s) {
    size_t i = samples <= 0 ? s : size_t(pick.next() % n);
    double h = 1e-5 * std::max(1.0, std::abs(xd[i]));
    double old = xd[i];
    xd[i] = old + h;
    double lp = loss(xd);
    xd[i] = old - h;
    double lm = loss(xd);
    xd[i] = old;
    idx[s] = i;
    fd[s] = (lp - lm) / (2 * h);
    max_g = std::max(max_g, std::abs(fd[s]));
  }
  const double lim = tol * std::max(1.0, max_g);
  double worst = 0;
  size_t ws = 0;
  for (size_t s = 0; s < m; ++s) {
    double e = std::abs(fd[s] - grad[idx[s]]) / (lim + rel_extra * std::abs(fd[s]));
    if (std::isnan(e)) e = INFINITY;
    if (e > worst) {
      worst = e;
      ws = s;
    }
  }
  if (m == 0) return;
  EXPECT_LE(worst, 1.0) << what << ": coordinate " << idx[ws] << " analytic " << grad[idx[ws]]
                        << " vs finite difference " << fd[ws] << " (max |g| " << max_g << ")";
}

// ---- fixture: one instance per backend -------------------------------------------------------------
class BackendOps : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { be_ = make_backend(GetParam()); }
  Backend& be() { return *be_; }

 private:
  std::shared_ptr<Backend> be_;
};

std::string backend_test_name(const testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;  // "cpu", "cuda:0" -> "cuda_0" (test names are identifiers)
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, testing::ValuesIn(available_backends()),
                         backend_test_name);

// Every usable GPU is among the backends above; where there is none, this says why the ops ran on
// the CPU alone.
TEST(BackendOpsDevices, CudaBackendsAreTestedWhenPresent) {
  const std::vector<std::string> all = available_backends();
  const auto gpus = std::count_if(all.begin(), all.end(),
                                  [](const std::string& n) { return n.starts_with("cuda:"); });
  if (gpus == 0)
    GTEST_SKIP() << "no CUDA backend tested: "
                 << (cuda_compiled() ? (cuda_devices().empty() ? cuda_unavailable_reason()
                                                               : "no device of compute capability 8.0+")
                                     : cuda_unavailable_reason());
  for (const CudaDeviceInfo& d : cuda_devices()) {
    if (d.cc_major >= kCudaMinMajor) {
      EXPECT_NE(std::find(all.begin(), all.end(), "cuda:" + std::to_string(d.index)), all.end());
    }
  }
}

// =================================================================================================
// Memory
// =================================================================================================
TEST_P(BackendOps, MemoryRoundTrip) {
  Backend& b = be();
  EXPECT_FALSE(b.name().empty());
  DeviceBuffer fresh(b, 1001);  // alloc is zero-filled
  std::vector<uint8_t> h(1001, 0xAB);
  b.to_host(h.data(), fresh.as<void>(), h.size());
  for (uint8_t v : h) ASSERT_EQ(v, 0);

  VecF x = randn(257, 1);
  Dev<float> a(b, x);
  EXPECT_EQ(a.get(), x);
  Dev<float> c = nan_out(b, 257);
  b.copy(c.p() + 3, a.p() + 5, 17 * sizeof(float));  // device to device, at offsets
  b.zero(c.p() + 100, 57 * sizeof(float));
  b.synchronize();
  VecF got = c.get();
  for (int i = 0; i < 257; ++i) {
    if (i >= 3 && i < 20) EXPECT_EQ(got[i], x[i + 2]) << i;
    else if (i >= 100 && i < 157) EXPECT_TRUE(same_bits(got[i], 0.0f)) << i;
    else EXPECT_TRUE(std::isnan(got[i])) << i;
  }
  auto t = b.timer();
  t->start();
  b.scale(a.p(), 2.0f, 257);
  EXPECT_GE(t->stop(), 0.0);
}

// =================================================================================================
// bf16 conversions
// =================================================================================================
TEST_P(BackendOps, Bf16Conversions) {
  Backend& b = be();
  // Round-to-nearest-even, ties included: the scalar f32_to_bf16 of dtype.h is the rule.
  VecF special = {0.0f, -0.0f, 1.0f, -2.5f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -(1.0f + 1.0f / 256),
                  65504.0f, 1e-30f, std::numeric_limits<float>::max(), INFINITY, -INFINITY, kNaN};
  VecF x = randn(1001, 1, 3.0f);
  x.insert(x.end(), special.begin(), special.end());
  Dev<float> xd(b, x);
  Dev<bf16> yd(b, VecH(x.size(), 0x1234));
  b.f32_to_bf16(xd.p(), yd.p(), int64_t(x.size()));
  VecH y = yd.get();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {  // any quiet NaN will do (devices differ in the payload they keep)
      EXPECT_TRUE(std::isnan(bf16_to_f32(y[i])));
      continue;
    }
    ASSERT_EQ(y[i], f32_to_bf16(x[i])) << i << " " << x[i];
    if (std::isfinite(bf16_to_f32(y[i]))) {  // (FLT_MAX rightly overflows to infinity)
      EXPECT_LE(std::abs(bf16_to_f32(y[i]) - x[i]), kBf16Rel * std::abs(x[i])) << i;
    }
  }
  EXPECT_EQ(y[1001 + 2], 0x3f80);  // 1.0
  EXPECT_EQ(y[1001 + 4], 0x3f80);  // tie -> even
  EXPECT_EQ(y[1001 + 5], 0x3f82);  // tie -> even (up)
  EXPECT_EQ(y[1001 + 9], 0x7f80);  // FLT_MAX is past bf16's largest finite value + half an ulp

  // bf16 -> fp32 is exact: every one of the 65536 bit patterns.
  VecH all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = bf16(i);
  Dev<bf16> ad(b, all);
  Dev<float> wd = nan_out(b, all.size());
  b.bf16_to_f32(ad.p(), wd.p(), int64_t(all.size()));
  VecF w = wd.get();
  for (int i = 0; i < 65536; ++i) {
    float want = bf16_to_f32(bf16(i));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(w[i])) << i;
    else ASSERT_TRUE(same_bits(w[i], want)) << i;
  }

  // convert(): a copy for F32 (also in place), a rounding for BF16, an Error otherwise.
  VecF r = randn(333, 2);
  Dev<float> rd(b, r);
  Dev<float> cf = nan_out(b, r.size());
  b.convert(rd.p(), cf.p(), int64_t(r.size()), DType::F32);
  EXPECT_EQ(cf.get(), r);
  b.convert(rd.p(), rd.p(), int64_t(r.size()), DType::F32);
  EXPECT_EQ(rd.get(), r);
  Dev<bf16> cb(b, VecH(r.size(), kBf16NaN));
  b.convert(rd.p(), cb.p(), int64_t(r.size()), DType::BF16);
  EXPECT_EQ(cb.get(), bf16_bits(r));
  EXPECT_THROW(b.convert(rd.p(), cf.p(), 1, DType::I32), Error);
}

// =================================================================================================
// gemm and the linear helpers
// =================================================================================================
// fp32 accumulation of K products: in practice (sequential, blocked or tree order) the rounding
// error grows like sqrt(K) * u * sum_k |a_k b_k|; 8x that is the bound. Inputs rounded to TF32
// (10-bit mantissa) would miss it by an order of magnitude, so a device that silently multiplies
// "fp32" in TF32 fails. bf16 precision rounds the inputs, which the reference rounds identically,
// and accumulates in fp32: the same bound.
// pad > 0: every stored matrix has `pad` more columns than it uses (row strides lda, ldb, ldc), the
// extra ones NaN in A and B (a read of them poisons C) and a sentinel in C (which must stay).
static void gemm_case(Backend& be, MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      bool acc, int64_t pad = 0) {
  SCOPED_TRACE(testing::Message() << prec_name(prec) << " ta" << ta << " tb" << tb << " M" << M
                                  << " N" << N << " K" << K << " acc" << acc << " pad" << pad);
  VecF a = randn(M * K, 11 + M + K), bm = randn(K * N, 12 + N), c0 = randn(M * N, 13);
  if (prec == MatPrec::BF16) {
    a = round_bf16(a);
    bm = round_bf16(bm);
  }
  // Stored shapes (rows x used columns) and their strides.
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  const int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
  auto stored = [&](const VecF& v, int64_t rows, int64_t cols, int64_t ld, float fill) {
    VecF out(size_t(rows * ld), fill);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) out[size_t(r * ld + j)] = v[size_t(r * cols + j)];
    return out;
  };
  const float sentinel = 12345.0f;
  Dev<float> ad(be, stored(a, ar, ac, lda, kNaN)), bd(be, stored(bm, br, bc, ldb, kNaN));
  Dev<float> cd(be, stored(acc ? c0 : VecF(M * N, kNaN), M, N, ldc, sentinel));
  Dev<bf16> ah(be, VecH(size_t(ar * lda))), bh(be, VecH(size_t(br * ldb)));
  const void* A = ad.p();
  const void* B = bd.p();
  if (prec == MatPrec::BF16) {
    be.f32_to_bf16(ad.p(), ah.p(), ar * lda);
    be.f32_to_bf16(bd.p(), bh.p(), br * ldb);
    A = ah.p();
    B = bh.p();
  }
  be.prepare_gemm(prec, ta, tb, M, N, K);
  be.gemm({.prec = prec, .trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .A = A, .B = B, .C = cd.p(),
           .accumulate = acc, .lda = pad ? lda : 0, .ldb = pad ? ldb : 0, .ldc = pad ? ldc : 0});
  VecD ref(M * N), scale(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = acc ? c0[i * N + j] : 0.0, sa = acc ? std::abs(c0[i * N + j]) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        double p = double(ta ? a[k * M + i] : a[i * K + k]) * double(tb ? bm[j * K + k] : bm[k * N + j]);
        s += p;
        sa += std::abs(p);
      }
      ref[i * N + j] = s;
      scale[i * N + j] = sa;
    }
  const VecF got = cd.get();
  VecF used(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      if (j < N) used[size_t(i * N + j)] = got[size_t(i * ldc + j)];
      else ASSERT_EQ(got[size_t(i * ldc + j)], sentinel) << "C's padding column " << j << " of row " << i;
    }
  expect_close(used, ref, 1e-30, 8 * kU32 * std::sqrt(double(K + 1)), "C", &scale);
}

TEST_P(BackendOps, Gemm) {
  for (MatPrec p : {MatPrec::F32, MatPrec::BF16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          gemm_case(be(), p, ta, tb, 37, 53, 29, acc);
          gemm_case(be(), p, ta, tb, 5, 70, 131, acc);
          gemm_case(be(), p, ta, tb, 1, 1, 1, acc);
          gemm_case(be(), p, ta, tb, 130, 257, 300, acc);
        }
}

TEST_P(BackendOps, GemmRowStrides) {
  // Operands and result stored wider than they are used, as the LM head's logits are (ModelLayout's
  // logits_ld), in all three of the head's products and the other layouts.
  for (MatPrec p : {MatPrec::F32, MatPrec::BF16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true})
          for (int64_t pad : {int64_t(4), int64_t(16)}) gemm_case(be(), p, ta, tb, 37, 53, 29, acc, pad);
  for (bool acc : {false, true}) gemm_case(be(), MatPrec::F32, true, false, 2112, 40, 67, acc, 16);  // dW += dy^T x
}

TEST_P(BackendOps, GemmBf16RoundsItsInputs) {
  // bf16 precision really multiplies bf16 values: against the unrounded fp32 inputs its relative
  // error is that of 8-bit inputs (~2^-9 per product, averaging down over K), far above fp32's.
  int64_t M = 33, N = 65, K = 96;
  VecF a = randn(M * K, 3), bm = randn(K * N, 4);
  Dev<bf16> ah(be(), bf16_bits(a)), bh(be(), bf16_bits(bm));
  Dev<float> c = nan_out(be(), M * N);
  be().gemm({.prec = MatPrec::BF16, .M = M, .N = N, .K = K, .A = ah.p(), .B = bh.p(), .C = c.p()});
  VecF got = c.get();
  double err = 0, norm = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(a[i * K + k]) * bm[k * N + j];
      err += (s - got[i * N + j]) * (s - got[i * N + j]);
      norm += s * s;
    }
  EXPECT_LT(std::sqrt(err / norm), 1e-2);
  EXPECT_GT(std::sqrt(err / norm), 1e-4);
}

TEST_P(BackendOps, Linear) {
  // y = x W^T and its two backward products, against finite differences of the float64 layer (on
  // the inputs as the precision rounds them). 13-term fp32 sums are good to ~1e-7: y within 2e-6,
  // gradients within 1e-5 of the finite differences (which are exact to ~1e-9).
  Backend& b = be();
  int64_t N = 9, in = 13, out = 7;
  for (MatPrec p : {MatPrec::F32, MatPrec::BF16}) {
    SCOPED_TRACE(prec_name(p));
    const bool h = p == MatPrec::BF16;
    VecF x = randn(N * in, 5), W = randn(out * in, 6), R = randn(N * out, 7);
    if (h) {
      x = round_bf16(x);
      W = round_bf16(W);
      R = round_bf16(R);
    }
    auto up = [&](const VecF& v) { return Dev<bf16>(b, bf16_bits(v)); };
    Dev<float> xf(b, x), Wf(b, W), Rf(b, R);
    Dev<bf16> xh = up(x), Wh = up(W), Rh = up(R);
    const void* X = h ? (const void*)xh.p() : xf.p();
    const void* Wp = h ? (const void*)Wh.p() : Wf.p();
    const void* Rp = h ? (const void*)Rh.p() : Rf.p();
    Dev<float> y = nan_out(b, N * out), dx = nan_out(b, N * in);
    VecF dx0 = randn(N * in, 8), dW0 = randn(out * in, 9);
    Dev<float> dxa(b, dx0), dW(b, dW0);
    b.linear_fwd(p, X, Wp, y.p(), N, in, out);
    b.linear_bwd_input(p, Rp, Wp, dx.p(), N, in, out, false);
    b.linear_bwd_input(p, Rp, Wp, dxa.p(), N, in, out, true);
    b.linear_bwd_weight(p, Rp, X, dW.p(), N, in, out);
    auto fwd = [&](const VecD& xx, const VecD& ww) {
      VecD o(N * out, 0.0);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < out; ++j)
          for (int64_t i = 0; i < in; ++i) o[n * out + j] += xx[n * in + i] * ww[j * in + i];
      return o;
    };
    expect_close(y.get(), fwd(to_d(x), to_d(W)), 2e-6, 2e-6, "y");
    VecF g = dx.get(), ga = dxa.get(), gW = dW.get();
    check_grad([&](const VecD& xx) { return dot(fwd(xx, to_d(W)), R); }, x, g, 1e-5, -1, "dx");
    for (size_t i = 0; i < ga.size(); ++i) ga[i] -= dx0[i];
    check_grad([&](const VecD& xx) { return dot(fwd(xx, to_d(W)), R); }, x, ga, 1e-5, -1, "dx +=");
    for (size_t i = 0; i < gW.size(); ++i) gW[i] -= dW0[i];
    check_grad([&](const VecD& ww) { return dot(fwd(to_d(x), ww), R); }, W, gW, 1e-5, -1, "dW +=");
  }
}

// =================================================================================================
// Embedding, RMSNorm
// =================================================================================================
TEST_P(BackendOps, Embedding) {
  Backend& b = be();
  int64_t N = 300, C = 70, V = 50;
  Rng r(30);
  VecI tok(N);
  for (auto& t : tok) t = int32_t(r.next() % (V - 3));  // the last rows are never looked up
  tok[0] = tok[1] = tok[2] = 7;                          // repeats
  VecF wte = randn(V * C, 31), R = randn(N * C, 32), dw0 = randn(V * C, 33);
  Dev<int32_t> td(b, tok);
  Dev<float> wd(b, wte), Rd(b, R), dwd(b, dw0);
  Dev<float> out = nan_out(b, N * C);
  b.embedding_fwd(td.p(), wd.p(), out.p(), N, C);
  VecF want(N * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) want[n * C + c] = wte[tok[n] * C + c];
  expect_same(out.get(), want, "out");  // a copy
  b.embedding_bwd(td.p(), Rd.p(), dwd.p(), N, C);
  VecD ref = to_d(dw0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) ref[tok[n] * C + c] += R[n * C + c];
  // ~6 fp32 terms of O(1) per element, summed in any order: a few ulp.
  expect_close(dwd.get(), ref, 2e-6, 2e-6, "dwte +=");
}

TEST_P(BackendOps, EmbedSmear) {
  // Token smearing fused with the embedding (EmbedSmearArgs), forward and backward against float64:
  // rows of 50 positions (the first without a previous token, and some others), repeated tokens and
  // tokens equal to their predecessor; a gate narrower than the row and one as wide.
  Backend& b = be();
  for (int64_t C : {int64_t(70), int64_t(8)}) {
    SCOPED_TRACE(C);
    const int64_t N = 300, V = 50, T = 50;
    const int k = int(std::min<int64_t>(12, C));
    Rng r(40);
    VecI tok(N), prev(N);
    for (int64_t n = 0; n < N; ++n) tok[n] = int32_t(r.next() % (V - 3));
    tok[10] = tok[9];  // a token after itself: both of its row's gradients land in one table row
    for (int64_t n = 0; n < N; ++n) prev[n] = n % T == 0 || n % 37 == 5 ? -1 : tok[n - 1];
    VecF wte = randn(V * C, 41), dout = randn(N * C, 42), dwte0 = randn(V * C, 43), w = randn(1 + k, 44);
    w[0] = 0.7f;
    const VecF dw0 = randn(1 + k, 45);
    Dev<int32_t> td(b, tok), pd(b, prev);
    Dev<float> wd(b, wte), wsd(b, w), gd(b, dout), dwd(b, dwte0), dwsd(b, dw0);
    Dev<float> out = nan_out(b, N * C);
    b.embed_smear_fwd({.N = N, .C = C, .k = k, .tok = td.p(), .prev = pd.p(), .wte = wd.p(), .w = wsd.p(),
                       .out = out.p()});
    VecD O(N * C), Os(N * C), DW = to_d(dwte0), DWS = to_d(dw0), DWSs(1 + k, 1.0);
    for (int64_t n = 0; n < N; ++n) {
      const float* e = wte.data() + tok[n] * C;
      double z = 0;
      for (int c = 0; c < k; ++c) z += double(w[1 + c]) * e[c];
      const double s = 1.0 / (1.0 + std::exp(-z)), lam = w[0];
      const float* p = prev[n] >= 0 ? wte.data() + prev[n] * C : nullptr;
      const float* d = dout.data() + n * C;
      double u = 0;
      for (int64_t c = 0; c < C; ++c) {
        O[n * C + c] = e[c] + (p ? lam * s * p[c] : 0.0);
        Os[n * C + c] = std::abs(e[c]) + (p ? std::abs(lam * s * p[c]) : 0.0);
        if (p) u += double(d[c]) * p[c];
      }
      const double dz = p ? lam * u * s * (1 - s) : 0.0;
      for (int64_t c = 0; c < C; ++c) {
        DW[tok[n] * C + c] += d[c] + (c < k ? dz * w[1 + c] : 0.0);
        if (p) DW[prev[n] * C + c] += lam * s * d[c];
      }
      if (p) DWS[0] += s * u, DWSs[0] += std::abs(s * u);
      for (int c = 0; c < k; ++c) DWS[1 + c] += dz * e[c], DWSs[1 + c] += std::abs(dz * e[c]);
    }
    expect_close(out.get(), O, 1e-7, 1e-6, "out", &Os);
    b.embed_smear_bwd({.N = N, .C = C, .k = k, .tok = td.p(), .prev = pd.p(), .wte = wd.p(), .w = wsd.p(),
                       .dout = gd.p(), .dwte = dwd.p(), .dw = dwsd.p()});
    // Each table row sums ~12 positions' terms of O(1) in fp32, in an order the backend picks.
    expect_close(dwd.get(), DW, 1e-5, 1e-5, "dwte +=");
    const VecF dws = dwsd.get();
    for (int j = 0; j <= k; ++j) EXPECT_NEAR(dws[size_t(j)], DWS[size_t(j)], 2e-6 * (DWSs[size_t(j)] + 1)) << "dw " << j;
  }
}

static VecD rmsnorm_ref(const VecD& x, const VecD* g, int64_t rows, int64_t C, double eps,
                        VecD* rstd = nullptr) {
  VecD y(x.size());
  if (rstd) rstd->resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
    double s = 1.0 / std::sqrt(ss / C + eps);
    if (rstd) (*rstd)[r] = s;
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = x[r * C + c] * s * (g ? (*g)[c] : 1.0);
  }
  return y;
}

TEST_P(BackendOps, RMSNorm) {
  // Forward: an fp32 sum of C squares and a few products, ~2e-7 relative in any summation order:
  // y within 2e-6 (+ bf16 rounding), rstd within 1e-6 (room for a device rsqrt of a few ulp).
  // Backward: within 1e-5 of the finite differences (which are exact to ~1e-9).
  Backend& b = be();
  struct Case { int64_t rows, C; int samples; };
  for (Case cs : {Case{7, 37, -1}, Case{129, 256, 300}})
    for (bool gain : {false, true})
      for (DType ot : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(testing::Message() << "rows" << cs.rows << " C" << cs.C << " gain" << gain << " "
                                        << dtype_name(ot));
        const int64_t rows = cs.rows, C = cs.C;
        const float eps = 1e-6f;
        VecF x = randn(rows * C, 21 + C), g = randn(C, 22, 0.5f), R = randn(rows * C, 23);
        for (auto& v : g) v += 1.0f;
        Dev<float> xd(b, x), gd(b, g), Rd(b, R);
        Dev<float> rstd = nan_out(b, rows);
        const float* gp = gain ? gd.p() : nullptr;
        VecF y = run_with_output(b, ot, rows * C, [&](void* out) {
          b.rmsnorm_fwd(
              {.rows = rows, .C = C, .eps = eps, .x = xd.p(), .g = gp, .y = out, .out_t = ot, .rstd = rstd.p()});
        });
        VecD gdd = to_d(g), rr;
        const VecD* gref = gain ? &gdd : nullptr;
        VecD yr = rmsnorm_ref(to_d(x), gref, rows, C, eps, &rr);
        expect_close(y, yr, 1e-6, 2e-6 + (ot == DType::BF16 ? kBf16Rel : 0.0), "y");
        expect_close(rstd.get(), rr, 0, 1e-6, "rstd");

        VecF dx0(rows * C, 0.5f), dg0(C, 0.25f);
        Dev<float> dx(b, dx0), dg(b, dg0);
        b.rmsnorm_bwd({.rows = rows, .C = C, .x = xd.p(), .g = gp, .rstd = rstd.p(), .dy = Rd.p(), .dx = dx.p(),
                       .dg = gain ? dg.p() : nullptr});
        VecF gx = dx.get(), gg = dg.get();
        for (auto& v : gx) v -= 0.5f;  // it accumulates
        check_grad([&](const VecD& xx) { return dot(rmsnorm_ref(xx, gref, rows, C, eps), R); }, x, gx,
                   1e-5, cs.samples, "dx +=");
        if (gain) {
          for (auto& v : gg) v -= 0.25f;
          check_grad([&](const VecD& gv) { return dot(rmsnorm_ref(to_d(x), &gv, rows, C, eps), R); },
                     g, gg, 1e-5, -1, "dg +=");
        } else {
          expect_same(gg, dg0, "dg untouched without a gain");
        }
      }
}

TEST_P(BackendOps, RMSNormWithResidualAdd) {
  // The fused residual add: sum = x + r bit for bit (one fp32 add), y and rstd those of the plain
  // op on sum; sum written separately and in place over x.
  Backend& b = be();
  for (int64_t C : {int64_t(37), int64_t(256)})
    for (DType ot : {DType::F32, DType::BF16})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(testing::Message() << "C" << C << " " << dtype_name(ot) << (in_place ? " in place" : ""));
        const int64_t rows = 33;
        const float eps = 1e-6f;
        VecF x = randn(rows * C, 61), r = randn(rows * C, 62), g = randn(C, 63, 0.5f);
        for (auto& v : g) v += 1.0f;
        VecF want_sum(x.size());
        for (size_t i = 0; i < x.size(); ++i) want_sum[i] = x[i] + r[i];
        Dev<float> xd(b, x), rd(b, r), gd(b, g);
        Dev<float> sum = nan_out(b, rows * C), rstd = nan_out(b, rows);
        float* sp = in_place ? xd.p() : sum.p();
        VecF y = run_with_output(b, ot, rows * C, [&](void* out) {
          b.rmsnorm_fwd({.rows = rows, .C = C, .eps = eps, .x = xd.p(), .g = gd.p(), .residual = rd.p(), .sum = sp,
                         .y = out, .out_t = ot, .rstd = rstd.p()});
        });
        expect_same(in_place ? xd.get() : sum.get(), want_sum, "sum");
        VecD gdd = to_d(g), rr;
        VecD yr = rmsnorm_ref(to_d(want_sum), &gdd, rows, C, eps, &rr);
        expect_close(y, yr, 1e-6, 2e-6 + (ot == DType::BF16 ? kBf16Rel : 0.0), "y");
        expect_close(rstd.get(), rr, 0, 1e-6, "rstd");
      }
}

// =================================================================================================
// RoPE, head layouts, the fused qkv stage
// =================================================================================================
static double rope_angle(int pos, int i, int hd, double base) {
  return pos * std::pow(base, -2.0 * i / hd);
}

static VecD rope_ref(const VecD& x, int64_t rows, int T, int hd, double base, int pos0) {
  VecD y(x.size());
  int h2 = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    int pos = pos0 + int(r % T);
    for (int i = 0; i < h2; ++i) {
      double ang = rope_angle(pos, i, hd, base);
      double a = x[r * hd + i], c = x[r * hd + i + h2];
      y[r * hd + i] = a * std::cos(ang) - c * std::sin(ang);
      y[r * hd + i + h2] = a * std::sin(ang) + c * std::cos(ang);
    }
  }
  return y;
}

TEST_P(BackendOps, RopeTables) {
  // The tables are fp32 values of cos/sin at exact angles: within an fp32 rounding (6e-8) of the
  // float64 values. An angle computed in fp32 would be off by pos * 6e-8 rad, 6e-5 at position
  // 1000, so 1e-6 also checks that the angles are not.
  int T = 1000, hd = 64;
  double base = 10000.0;
  Dev<float> cs = nan_out(be(), size_t(T) * hd / 2), sn = nan_out(be(), size_t(T) * hd / 2);
  be().rope_tables(cs.p(), sn.p(), T, hd, float(base));
  VecD rc(size_t(T) * hd / 2), rs(rc.size());
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < hd / 2; ++i) {
      rc[size_t(t) * hd / 2 + i] = std::cos(rope_angle(t, i, hd, base));
      rs[size_t(t) * hd / 2 + i] = std::sin(rope_angle(t, i, hd, base));
    }
  expect_close(cs.get(), rc, 1e-6, 0, "cos");
  expect_close(sn.get(), rs, 1e-6, 0, "sin");
}

TEST_P(BackendOps, Rope) {
  // In place, at positions pos0 + r % T. fp32 rotation of O(1) values with fp32 tables: a few ulp.
  struct Case { int T, hd, pos0, reps; double base; };
  for (Case c : {Case{13, 10, 3, 3, 10000.0}, Case{7, 128, 1000, 2, 500.0}, Case{64, 64, 1, 1, 10000.0}}) {
    SCOPED_TRACE(testing::Message() << "T" << c.T << " hd" << c.hd << " pos0" << c.pos0);
    int npos = c.T + c.pos0;
    Dev<float> cs = nan_out(be(), size_t(npos) * c.hd / 2), sn = nan_out(be(), size_t(npos) * c.hd / 2);
    be().rope_tables(cs.p(), sn.p(), npos, c.hd, float(c.base));
    int64_t rows = int64_t(c.reps) * c.T;
    VecF x = randn(rows * c.hd, 41);
    Dev<float> xd(be(), x);
    be().rope_fwd(xd.p(), rows, c.T, c.hd, cs.p(), sn.p(), c.pos0);
    expect_close(xd.get(), rope_ref(to_d(x), rows, c.T, c.hd, c.base, c.pos0), 2e-6, 0, "x");
  }
}

TEST_P(BackendOps, SplitMergeHeads) {
  // Layout changes: exact copies. merge into bf16 is the exact rounding of each copied value. Only
  // the nh*hd columns at the pointer are written; the rest of each ld-wide row is left alone.
  Backend& b = be();
  struct Case { int B, T, nh, hd; int64_t ld, off; };
  for (Case c : {Case{2, 5, 3, 4, 17, 2}, Case{1, 67, 2, 64, 192, 64}}) {
    SCOPED_TRACE(testing::Message() << "B" << c.B << " T" << c.T << " nh" << c.nh << " hd" << c.hd);
    const int64_t rows = int64_t(c.B) * c.T, nY = rows * c.nh * c.hd;
    VecF x = randn(rows * c.ld, 51);
    Dev<float> xd(b, x);
    Dev<float> y = nan_out(b, nY);
    b.split_heads({.B = c.B, .T = c.T, .nh = c.nh, .hd = c.hd, .ld = c.ld, .x = xd.p() + c.off, .y = y.p()});
    VecF yh = y.get();
    VecF want(nY);
    for (int bb = 0; bb < c.B; ++bb)
      for (int h = 0; h < c.nh; ++h)
        for (int t = 0; t < c.T; ++t)
          for (int d = 0; d < c.hd; ++d)
            want[((size_t(bb) * c.nh + h) * c.T + t) * c.hd + d] =
                x[(size_t(bb) * c.T + t) * c.ld + c.off + h * c.hd + d];
    expect_same(yh, want, "split");

    auto inside = [&](int64_t i) {
      int64_t col = i % c.ld;
      return col >= c.off && col < c.off + c.nh * c.hd;
    };
    VecF zf0 = randn(rows * c.ld, 52);
    Dev<float> zf(b, zf0);
    b.merge_heads({.B = c.B, .T = c.T, .nh = c.nh, .hd = c.hd, .ld = c.ld, .y = y.p(), .x = zf.p() + c.off,
                   .out_t = DType::F32});
    VecF zwant = zf0;
    for (size_t i = 0; i < zwant.size(); ++i)
      if (inside(int64_t(i))) zwant[i] = x[i];
    expect_same(zf.get(), zwant, "merge f32");

    VecH zh0 = bf16_bits(randn(rows * c.ld, 53));
    Dev<bf16> zh(b, zh0);
    b.merge_heads({.B = c.B, .T = c.T, .nh = c.nh, .hd = c.hd, .ld = c.ld, .y = y.p(), .x = zh.p() + c.off,
                   .out_t = DType::BF16});
    VecH hwant = zh0;
    for (size_t i = 0; i < hwant.size(); ++i)
      if (inside(int64_t(i))) hwant[i] = f32_to_bf16(x[i]);
    expect_same(zh.get(), hwant, "merge bf16");
  }
}

// float64 reference of the fused attention input stage: split [q | k | v] into heads, RMSNorm the
// q and k head vectors (qk_norm; gains optional), rotate them at positions 0..T-1.
struct QkvShape { int B, T, H, Hkv, hd; };
struct QkvRef { VecD q, k, v, q_rstd, k_rstd; };

static QkvRef qkv_ref(const VecD& qkv, const VecD* qg, const VecD* kg, const QkvShape& s,
                      bool qk_norm, double eps, double base) {
  const int64_t ld = int64_t(s.H + 2 * s.Hkv) * s.hd, N = int64_t(s.B) * s.T;
  const int h2 = s.hd / 2;
  QkvRef r;
  r.q.resize(N * s.H * s.hd);
  r.k.resize(N * s.Hkv * s.hd);
  r.v.resize(N * s.Hkv * s.hd);
  r.q_rstd.resize(N * s.H);
  r.k_rstd.resize(N * s.Hkv);
  VecD tmp(s.hd);
  for (int64_t n = 0; n < N; ++n) {
    int b = int(n / s.T), t = int(n % s.T);
    for (int j = 0; j < s.H + 2 * s.Hkv; ++j) {
      const double* src = &qkv[n * ld + int64_t(j) * s.hd];
      if (j >= s.H + s.Hkv) {
        int h = j - s.H - s.Hkv;
        std::copy(src, src + s.hd, &r.v[((size_t(b) * s.Hkv + h) * s.T + t) * s.hd]);
        continue;
      }
      bool isq = j < s.H;
      int h = isq ? j : j - s.H, nh = isq ? s.H : s.Hkv;
      size_t hrow = (size_t(b) * nh + h) * s.T + t;
      const VecD* g = isq ? qg : kg;
      double sc = 1.0;
      if (qk_norm) {
        double ss = 0;
        for (int d = 0; d < s.hd; ++d) ss += src[d] * src[d];
        sc = 1.0 / std::sqrt(ss / s.hd + eps);
        (isq ? r.q_rstd : r.k_rstd)[hrow] = sc;
      }
      for (int d = 0; d < s.hd; ++d) tmp[d] = src[d] * sc * (qk_norm && g ? (*g)[d] : 1.0);
      double* dst = &(isq ? r.q : r.k)[hrow * s.hd];
      for (int i = 0; i < h2; ++i) {
        double ang = rope_angle(t, i, s.hd, base);
        dst[i] = tmp[i] * std::cos(ang) - tmp[i + h2] * std::sin(ang);
        dst[i + h2] = tmp[i] * std::sin(ang) + tmp[i + h2] * std::cos(ang);
      }
    }
  }
  return r;
}

TEST_P(BackendOps, QkvHeadsAddsValueEmbeddingRows) {
  // With a value embedding table, v = the split v columns + the row of each position's token
  // (one fp32 add: bit for bit), q and k unchanged.
  Backend& b = be();
  const QkvShape s{2, 9, 4, 2, 16};
  const int64_t N = int64_t(s.B) * s.T, ld = int64_t(s.H + 2 * s.Hkv) * s.hd, kvw = int64_t(s.Hkv) * s.hd;
  const size_t nq = size_t(N) * s.H * s.hd, nk = size_t(N) * kvw;
  const int V = 11;
  VecF qkv = randn(N * ld, 121), ve = randn(V * kvw, 122);
  VecI tok(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) tok[size_t(n)] = int32_t((n * 7 + 3) % V);
  Dev<float> cs = nan_out(b, size_t(s.T) * s.hd / 2), sn = nan_out(b, size_t(s.T) * s.hd / 2);
  b.rope_tables(cs.p(), sn.p(), s.T, s.hd, 10000.0f);
  Dev<float> xd(b, qkv), ved(b, ve);
  Dev<int32_t> td(b, tok);
  const HeadShape hs{.B = s.B, .H = s.H, .Hkv = s.Hkv, .hd = s.hd};
  auto run = [&](bool with_ve) {
    Dev<float> q = nan_out(b, nq), k = nan_out(b, nk), v = nan_out(b, nk), qraw = nan_out(b, nq),
               kraw = nan_out(b, nk), qr = nan_out(b, N * s.H), kr = nan_out(b, N * s.Hkv);
    b.qkv_heads_fwd({.shape = hs, .T = s.T, .norm = {.on = true, .eps = 1e-6f}, .rope = {.cos_t = cs.p(), .sin_t = sn.p()},
                     .qkv = xd.p(), .ve = with_ve ? ved.p() : nullptr, .tok = with_ve ? td.p() : nullptr,
                     .qraw = qraw.p(), .kraw = kraw.p(), .q_rstd = qr.p(), .k_rstd = kr.p(), .q = q.p(), .k = k.p(),
                     .v = v.p()});
    return std::vector<VecF>{q.get(), k.get(), v.get()};
  };
  const auto plain = run(false), with = run(true);
  expect_same(with[0], plain[0], "q");
  expect_same(with[1], plain[1], "k");
  VecF want = plain[2];
  for (int64_t n = 0; n < N; ++n)
    for (int h = 0; h < s.Hkv; ++h)
      for (int d = 0; d < s.hd; ++d) {
        const size_t at = ((size_t(n / s.T) * s.Hkv + h) * s.T + size_t(n % s.T)) * s.hd + d;
        want[at] += ve[size_t(tok[size_t(n)]) * kvw + h * s.hd + d];
      }
  expect_same(with[2], want, "v");
}

TEST_P(BackendOps, QkvHeads) {
  // Forward: fp32 norm + rotation of O(1) values, a few ulp: q, k within 2e-6, rstd within 1e-6;
  // v and the saved pre-norm heads are copies. Backward: dqkv (plus bf16 rounding when it is
  // written in bf16) and the gain gradients, sums over all rows, within 1e-5 of the finite
  // differences.
  Backend& b = be();
  const float eps = 1e-6f;
  const double base = 500.0;
  enum Norm { kOff, kNoGain, kGain };
  for (QkvShape s : {QkvShape{2, 7, 4, 2, 10}, QkvShape{1, 33, 4, 1, 64}, QkvShape{2, 5, 3, 3, 16}})
    for (Norm nm : {kOff, kNoGain, kGain})
      for (DType ot : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(testing::Message() << "B" << s.B << " T" << s.T << " H" << s.H << " Hkv" << s.Hkv
                                        << " hd" << s.hd << " norm" << int(nm) << " " << dtype_name(ot));
        const bool qkn = nm != kOff, gains = nm == kGain;
        const int64_t N = int64_t(s.B) * s.T, ld = int64_t(s.H + 2 * s.Hkv) * s.hd;
        const size_t nq = size_t(N) * s.H * s.hd, nk = size_t(N) * s.Hkv * s.hd;
        const int samples = N * ld > 2000 ? 300 : -1;
        VecF qkv = randn(N * ld, 111 + s.hd), qg = randn(s.hd, 112, 0.3f), kg = randn(s.hd, 113, 0.3f);
        for (auto& v : qg) v += 1;
        for (auto& v : kg) v += 1;
        Dev<float> cs = nan_out(b, size_t(s.T) * s.hd / 2), sn = nan_out(b, size_t(s.T) * s.hd / 2);
        b.rope_tables(cs.p(), sn.p(), s.T, s.hd, float(base));
        Dev<float> xd(b, qkv), qgd(b, qg), kgd(b, kg);
        Dev<float> q = nan_out(b, nq), k = nan_out(b, nk), v = nan_out(b, nk), qraw = nan_out(b, nq),
                   kraw = nan_out(b, nk), qr = nan_out(b, N * s.H), kr = nan_out(b, N * s.Hkv);
        const float* qgp = gains ? qgd.p() : nullptr;
        const float* kgp = gains ? kgd.p() : nullptr;
        const HeadShape hs{.B = s.B, .H = s.H, .Hkv = s.Hkv, .hd = s.hd};
        b.qkv_heads_fwd({.shape = hs, .T = s.T, .norm = {.on = qkn, .qg = qgp, .kg = kgp, .eps = eps},
                         .rope = {.cos_t = cs.p(), .sin_t = sn.p()}, .qkv = xd.p(), .qraw = qraw.p(),
                         .kraw = kraw.p(), .q_rstd = qr.p(), .k_rstd = kr.p(), .q = q.p(), .k = k.p(),
                         .v = v.p()});
        VecD qgd64 = to_d(qg), kgd64 = to_d(kg);
        const VecD* qgr = gains ? &qgd64 : nullptr;
        const VecD* kgr = gains ? &kgd64 : nullptr;
        QkvRef ref = qkv_ref(to_d(qkv), qgr, kgr, s, qkn, eps, base);
        expect_close(q.get(), ref.q, 2e-6, 2e-6, "q");
        expect_close(k.get(), ref.k, 2e-6, 2e-6, "k");
        VecF vv = v.get();
        for (size_t i = 0; i < nk; ++i) ASSERT_EQ(vv[i], float(ref.v[i])) << "v " << i;
        if (qkn) {
          expect_close(qr.get(), ref.q_rstd, 0, 1e-6, "q_rstd");
          expect_close(kr.get(), ref.k_rstd, 0, 1e-6, "k_rstd");
          // the pre-norm heads, saved for backward: the split layout of the q and k columns
          VecF qh = qraw.get(), kh = kraw.get();
          for (int64_t n = 0; n < N; ++n)
            for (int j = 0; j < s.H + s.Hkv; ++j) {
              bool isq = j < s.H;
              int h = isq ? j : j - s.H, nh = isq ? s.H : s.Hkv;
              size_t hrow = (size_t(n / s.T) * nh + h) * s.T + size_t(n % s.T);
              for (int d = 0; d < s.hd; ++d)
                ASSERT_EQ((isq ? qh : kh)[hrow * s.hd + d], qkv[n * ld + j * s.hd + d]) << "raw";
            }
        }

        VecF Rq = randn(nq, 114), Rk = randn(nk, 115), Rv = randn(nk, 116);
        Dev<float> dq(b, Rq), dk(b, Rk), dvv(b, Rv);
        VecF g0(s.hd, 0.25f);
        Dev<float> dqg(b, g0), dkg(b, g0);
        VecF dqkv = run_with_output(b, ot, N * ld, [&](void* out) {
          b.qkv_heads_bwd({.shape = hs, .T = s.T, .norm = {.on = qkn, .qg = qgp, .kg = kgp},
                           .rope = {.cos_t = cs.p(), .sin_t = sn.p()}, .dq = dq.p(), .dk = dk.p(),
                           .dv = dvv.p(), .qraw = qraw.p(), .kraw = kraw.p(), .q_rstd = qr.p(),
                           .k_rstd = kr.p(), .dqg = gains ? dqg.p() : nullptr,
                           .dkg = gains ? dkg.p() : nullptr, .dqkv = out, .dqkv_t = ot});
        });
        auto L = [&](const VecD& x, const VecD* gq, const VecD* gk) {
          QkvRef r = qkv_ref(x, gq, gk, s, qkn, eps, base);
          return dot(r.q, Rq) + dot(r.k, Rk) + dot(r.v, Rv);
        };
        const double extra = ot == DType::BF16 ? kBf16Rel : 0.0;
        check_grad([&](const VecD& x) { return L(x, qgr, kgr); }, qkv, dqkv, 1e-5, samples, "dqkv",
                   extra);
        VecF gq = dqg.get(), gk = dkg.get();
        if (gains) {
          for (auto& x : gq) x -= 0.25f;
          for (auto& x : gk) x -= 0.25f;
          check_grad([&](const VecD& g) { return L(to_d(qkv), &g, kgr); }, qg, gq, 1e-5, -1, "dqg +=");
          check_grad([&](const VecD& g) { return L(to_d(qkv), qgr, &g); }, kg, gk, 1e-5, -1, "dkg +=");
        } else {
          expect_same(gq, g0, "dqg untouched");
          expect_same(gk, g0, "dkg untouched");
        }
      }
}

// =================================================================================================
// Attention
// =================================================================================================
// float64 causal GQA attention; q [B,H,Tq,hd], k/v [B,Hkv,Tk,hd] (dense). Query i sits at position
// p = Tk - Tq + i and sees keys 0..p, or with window > 0 keys p - window + 1..p.
static VecD attn_ref(const VecD& q, const VecD& k, const VecD& v, int B, int H, int Hkv, int Tq,
                     int Tk, int hd, int window, VecD* lse = nullptr) {
  VecD o(size_t(B) * H * Tq * hd, 0.0);
  if (lse) lse->assign(size_t(B) * H * Tq, 0.0);
  int group = H / Hkv, off = Tk - Tq;
  double sc = 1.0 / std::sqrt(double(hd));
  VecD s(Tk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      int kvh = h / group;
      for (int i = 0; i < Tq; ++i) {
        const double* qi = &q[((size_t(b) * H + h) * Tq + i) * hd];
        int nk = off + i + 1, j0 = window > 0 ? std::max(0, nk - window) : 0;
        double mx = -1e300;
        for (int j = j0; j < nk; ++j) {
          const double* kj = &k[((size_t(b) * Hkv + kvh) * Tk + j) * hd];
          double a = 0;
          for (int d = 0; d < hd; ++d) a += qi[d] * kj[d];
          s[j] = a * sc;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = j0; j < nk; ++j) sum += std::exp(s[j] - mx);
        double* oi = &o[((size_t(b) * H + h) * Tq + i) * hd];
        for (int j = j0; j < nk; ++j) {
          double p = std::exp(s[j] - mx) / sum;
          const double* vj = &v[((size_t(b) * Hkv + kvh) * Tk + j) * hd];
          for (int d = 0; d < hd; ++d) oi[d] += p * vj[d];
        }
        if (lse) (*lse)[(size_t(b) * H + h) * Tq + i] = mx + std::log(sum);
      }
    }
  return o;
}

struct AttnCase { int B, H, Hkv, T, hd, window = 0; };

// q, k, v rounded to bf16 as the gemm implementation's inputs, in float64.
static VecD bf16_inputs(const VecF& x) { return to_d(round_bf16(x)); }
static VecD abs_values(VecD x) {
  for (double& e : x) e = std::abs(e);
  return x;
}

// The attention ops' tolerances on one backend: fp32 throughout (CPU, CUDA fp32), or bf16 inputs
// and probabilities (the CUDA gemm implementation, the CPU's bf16 attention: both round q, k, v, P
// and in the backward dO and dS to bf16, and sum in fp32). The latter is compared with the float64
// reference on the bf16-rounded q, k, v: rounding each probability to bf16 moves it by at most
// 2^-8 of itself, so o moves by at most 2^-8 sum_j P_j |v_j|, allowed twice (2^-7 times the
// reference attention of |v|); its gradients (bf16 P, dS, dO, q, k, v in the products) within
// 3e-2 of the finite differences' scale (the same bounds hold for the plan executed in float64
// with those roundings, test_attention_blocks.cpp).
struct AttnTolerance {
  bool gemm = false;      // the forward ran the gemm implementation
  bool gemm_bwd = false;  // the backward did (set with `gemm` for a backend of one implementation)
  double grad() const { return gemm_bwd ? 3e-2 : 2e-5; }
  // expects o (and lse unless null) close to the reference of q, k, v.
  void check_forward(const VecF& o, const VecF* lse, const VecF& q, const VecD& k, const VecD& v,
                     int B, int H, int Hkv, int Tq, int Tk, int hd, int window) const {
    VecD lr;
    if (!gemm) {
      VecD orf = attn_ref(to_d(q), k, v, B, H, Hkv, Tq, Tk, hd, window, &lr);
      expect_close(o, orf, 2e-5, 0, "o");
      if (lse) expect_close(*lse, lr, 2e-5, 0, "lse");
      return;
    }
    VecD kr = k, vr = v;
    for (double& e : kr) e = double(bf16_to_f32(f32_to_bf16(float(e))));
    for (double& e : vr) e = double(bf16_to_f32(f32_to_bf16(float(e))));
    const VecD qr = bf16_inputs(q);
    VecD orf = attn_ref(qr, kr, vr, B, H, Hkv, Tq, Tk, hd, window, &lr);
    const VecD pv = attn_ref(qr, kr, abs_values(vr), B, H, Hkv, Tq, Tk, hd, window);
    expect_close(o, orf, 2e-5, 1.0 / 128, "o", &pv);
    if (lse) expect_close(*lse, lr, 2e-5, 0, "lse");
  }
};

// Forward (o and the log-sum-exp) against float64: softmax-weighted sums of O(1) values in fp32,
// 2e-5. Backward: dq, dk, dv against FD of the float64 attention at `samples` coordinates each,
// tolerance 2e-5 (the fp32 gradients sum up to T terms, ~1e-6; the float64 differences are exact
// to ~1e-9). The gemm implementation: AttnTolerance.
static void attention_case(Backend& b, AttnCase c, int samples, AttnTolerance tol = {},
                           MatPrec prec = MatPrec::F32) {
  SCOPED_TRACE(testing::Message() << "B" << c.B << " H" << c.H << " Hkv" << c.Hkv << " T" << c.T
                                  << " hd" << c.hd << " window " << c.window);
  size_t nq = size_t(c.B) * c.H * c.T * c.hd, nkv = size_t(c.B) * c.Hkv * c.T * c.hd;
  VecF q = randn(nq, 61 + c.hd, 1.5f), k = randn(nkv, 62, 1.5f), v = randn(nkv, 63), R = randn(nq, 64);
  Dev<float> qd(b, q), kd(b, k), vd(b, v), Rd(b, R);
  Dev<float> o = nan_out(b, nq), lse = nan_out(b, size_t(c.B) * c.H * c.T);
  const HeadShape hs{.B = c.B, .H = c.H, .Hkv = c.Hkv, .hd = c.hd};
  b.attention_fwd({.shape = hs, .Tq = c.T, .Tk = c.T, .Tk_cap = c.T, .window = c.window, .prec = prec,
                   .q = qd.p(), .k = kd.p(), .v = vd.p(), .o = o.p(), .lse = lse.p()});
  const VecF lse_got = lse.get();
  tol.check_forward(o.get(), &lse_got, q, to_d(k), to_d(v), c.B, c.H, c.Hkv, c.T, c.T, c.hd,
                    c.window);
  Dev<float> dq = nan_out(b, nq), dk = nan_out(b, nkv), dv = nan_out(b, nkv);
  b.attention_bwd({.shape = hs, .T = c.T, .window = c.window, .prec = prec, .q = qd.p(), .k = kd.p(),
                   .v = vd.p(), .o = o.p(), .lse = lse.p(), .dout = Rd.p(), .dq = dq.p(), .dk = dk.p(),
                   .dv = dv.p()});
  VecD qv = to_d(q), kv = to_d(k), vv = to_d(v);
  auto L = [&](const VecD& qq, const VecD& kk, const VecD& vx) {
    return dot(attn_ref(qq, kk, vx, c.B, c.H, c.Hkv, c.T, c.T, c.hd, c.window), R);
  };
  check_grad([&](const VecD& x) { return L(x, kv, vv); }, q, dq.get(), tol.grad(), samples, "dq");
  check_grad([&](const VecD& x) { return L(qv, x, vv); }, k, dk.get(), tol.grad(), samples, "dk");
  check_grad([&](const VecD& x) { return L(qv, kv, x); }, v, dv.get(), tol.grad(), samples, "dv");
}

namespace {

// The attention ops run once per backend and, on a GPU, once per attention implementation:
// "cpu", "cuda:N/fp32", "cuda:N/gemm" (backend/cuda/attention_select.h); on a CPU whose kernel
// variant has the bf16 attention (and CLOCKLM_CPU_ATTENTION does not force fp32) also "cpu/bf16":
// the ops called with bf16 precision (backend/cpu/attention_select.h).
std::vector<std::string> attention_variants() {
  std::vector<std::string> out;
  for (const std::string& b : available_backends()) {
    if (!b.starts_with("cuda:")) {
      out.push_back(b);
      if (b == "cpu" && cpu_attention_uses_bf16(cpu_attention_mode_from_env(), MatPrec::BF16))
        out.push_back("cpu/bf16");
      continue;
    }
    out.push_back(b + "/fp32");
    out.push_back(b + "/gemm");
    out.push_back(b + "/cudnn");
  }
  return out;
}

class BackendAttention : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& p = GetParam();
    const size_t slash = p.find('/');
    if (slash == std::string::npos) {
      be_ = make_backend(p);
      return;
    }
    if (p == "cpu/bf16") {
      be_ = make_backend("cpu");
      tol_.gemm = tol_.gemm_bwd = true;
      prec_ = MatPrec::BF16;
      return;
    }
    be_ = make_cuda_backend(std::stoi(p.substr(5, slash - 5)), p.substr(slash + 1));
    // cudnn, like gemm, multiplies bf16 roundings of the inputs (and runs gemm for the shapes
    // cuDNN does not serve): both are held to the bf16 tolerances.
    tol_.gemm = tol_.gemm_bwd = p.substr(slash + 1) != "fp32";
  }
  Backend& be() { return *be_; }
  void check(AttnCase c, int samples) { attention_case(*be_, c, samples, tol_, prec_); }
  AttnTolerance tol() const { return tol_; }
  MatPrec prec() const { return prec_; }
  // The CPU backend's description names the kernel of the latest call: bf16 for "cpu/bf16",
  // fp32 for "cpu".
  void TearDown() override {
    if (be_->name() != "cpu") return;
    const bool bf16 = prec_ == MatPrec::BF16;
    EXPECT_NE(be_->description().find(bf16 ? "attention bf16)" : "attention fp32)"), std::string::npos)
        << be_->description();
  }

 private:
  std::shared_ptr<Backend> be_;
  AttnTolerance tol_;
  MatPrec prec_ = MatPrec::F32;
};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backends, BackendAttention, testing::ValuesIn(attention_variants()),
                         backend_test_name);

TEST_P(BackendAttention, SmallHeadDims) {
  check({1, 2, 2, 5, 8}, -1);    // tiny, every coordinate
  check({2, 4, 2, 67, 16}, 60);  // GQA, T just past a 64 tile
  check({1, 3, 1, 130, 12}, 40); // MQA, three tiles
  check({1, 1, 1, 129, 6}, 40);
}

TEST_P(BackendAttention, HeadDim32) {
  check({1, 4, 2, 70, 32}, 40);  // GQA
  check({2, 3, 3, 33, 32}, 40);  // MHA
}

TEST_P(BackendAttention, HeadDim64) {
  check({1, 2, 1, 64, 64}, 40);  // MQA, exactly one tile
  check({1, 4, 2, 100, 64}, 40); // GQA
  check({2, 4, 2, 200, 64}, 20); // GQA, causal over two query blocks of the gemm implementation
}

TEST_P(BackendAttention, HeadDim128) {
  check({1, 2, 1, 77, 128}, 30);  // MQA
  check({1, 4, 2, 65, 128}, 30);  // GQA
}

TEST_P(BackendAttention, LongerThanAGemmBlock) {
  // More rows than one query block of the gemm implementation (128): several blocks, the last
  // one partial, each over its own key range.
  check({1, 2, 1, 300, 16}, 20);
  check({1, 4, 2, 260, 16, 100}, 20);
}

TEST_P(BackendAttention, SlidingWindow) {
  // Windows smaller than a tile, across tile edges (keys of a query split over two tiles, whole
  // tiles skipped), of one key (each query sees only itself) and as long as the row (= causal).
  check({1, 2, 1, 150, 16, 5}, 40);
  check({2, 4, 2, 200, 64, 70}, 40);
  check({1, 2, 2, 130, 32, 64}, 40);
  check({1, 1, 1, 40, 8, 1}, 40);
  check({1, 3, 1, 70, 128, 70}, 30);
}

TEST_P(BackendAttention, KVCache) {
  // Decoding: Tq new queries at the end of Tk valid keys in a cache allocated for Tk_cap. The
  // slots past Tk hold large finite garbage: an op that read them would be visibly wrong.
  // With a window, the queries see only the window's end of the cache.
  struct Case { int B, H, Hkv, Tq, Tk, cap, hd; bool with_lse; int window = 0; };
  for (Case c : {Case{2, 4, 2, 3, 70, 80, 16, true}, Case{1, 2, 1, 1, 129, 129, 64, false},
                 Case{1, 4, 2, 5, 33, 40, 128, true}, Case{2, 2, 2, 20, 20, 64, 32, true},
                 Case{1, 3, 1, 7, 100, 128, 6, false}, Case{2, 4, 2, 3, 150, 160, 16, true, 20},
                 Case{1, 2, 1, 70, 140, 140, 64, true, 66}, Case{1, 2, 1, 150, 300, 310, 32, true}}) {
    SCOPED_TRACE(testing::Message() << "B" << c.B << " H" << c.H << " Hkv" << c.Hkv << " Tq" << c.Tq
                                    << " Tk" << c.Tk << " cap" << c.cap << " hd" << c.hd << " window "
                                    << c.window);
    VecF q = randn(size_t(c.B) * c.H * c.Tq * c.hd, 71), kc = randn(size_t(c.B) * c.Hkv * c.cap * c.hd, 72),
         vc = randn(size_t(c.B) * c.Hkv * c.cap * c.hd, 73);
    VecD kd(size_t(c.B) * c.Hkv * c.Tk * c.hd), vd(kd.size());
    for (int bh = 0; bh < c.B * c.Hkv; ++bh)
      for (int t = 0; t < c.cap; ++t)
        for (int d = 0; d < c.hd; ++d) {
          size_t ci = (size_t(bh) * c.cap + t) * c.hd + d;
          if (t >= c.Tk) {
            kc[ci] *= 100.0f;
            vc[ci] *= 1000.0f;
            continue;
          }
          kd[(size_t(bh) * c.Tk + t) * c.hd + d] = kc[ci];
          vd[(size_t(bh) * c.Tk + t) * c.hd + d] = vc[ci];
        }
    Dev<float> qd(be(), q), kcd(be(), kc), vcd(be(), vc);
    Dev<float> o = nan_out(be(), q.size()), lse = nan_out(be(), size_t(c.B) * c.H * c.Tq);
    be().attention_fwd({.shape = {.B = c.B, .H = c.H, .Hkv = c.Hkv, .hd = c.hd}, .Tq = c.Tq, .Tk = c.Tk,
                        .Tk_cap = c.cap, .window = c.window, .prec = prec(), .q = qd.p(), .k = kcd.p(), .v = vcd.p(),
                        .o = o.p(), .lse = c.with_lse ? lse.p() : nullptr});
    const VecF lse_got = lse.get();
    tol().check_forward(o.get(), c.with_lse ? &lse_got : nullptr, q, kd, vd, c.B, c.H, c.Hkv, c.Tq,
                        c.Tk, c.hd, c.window);
  }
}

// One forward and backward of shape `c` on arbitrary inputs (their results unused).
static void attention_once(Backend& b, AttnCase c) {
  const size_t nq = size_t(c.B) * c.H * c.T * c.hd, nkv = size_t(c.B) * c.Hkv * c.T * c.hd;
  Dev<float> q(b, randn(nq, 1)), k(b, randn(nkv, 2)), v(b, randn(nkv, 3)), dout(b, randn(nq, 4));
  Dev<float> o = nan_out(b, nq), lse = nan_out(b, size_t(c.B) * c.H * c.T);
  Dev<float> dq = nan_out(b, nq), dk = nan_out(b, nkv), dv = nan_out(b, nkv);
  const HeadShape hs{.B = c.B, .H = c.H, .Hkv = c.Hkv, .hd = c.hd};
  b.attention_fwd({.shape = hs, .Tq = c.T, .Tk = c.T, .Tk_cap = c.T, .window = c.window, .q = q.p(),
                   .k = k.p(), .v = v.p(), .o = o.p(), .lse = lse.p()});
  b.attention_bwd({.shape = hs, .T = c.T, .window = c.window, .q = q.p(), .k = k.p(), .v = v.p(),
                   .o = o.p(), .lse = lse.p(), .dout = dout.p(), .dq = dq.p(), .dk = dk.p(), .dv = dv.p()});
  b.synchronize();
}

// Under auto, a GPU backend times every implementation serving a shape on its first call, keeps one, and its
// description says which per pass; the results are those of the one kept.
TEST(BackendAttentionAuto, PicksOnePerShapeAndSaysSo) {
  int gpus = 0;
  for (const std::string& n : available_backends()) {
    if (!n.starts_with("cuda:")) continue;
    ++gpus;
    std::shared_ptr<Backend> be = make_cuda_backend(std::stoi(n.substr(5)), "auto");
    EXPECT_NE(be->description().find("attention auto"), std::string::npos) << be->description();
    const AttnCase c{2, 4, 2, 200, 64};
    attention_once(*be, c);  // times the implementations of each pass and keeps one
    const std::string d = be->description();
    EXPECT_NE(d.find("fwd "), std::string::npos) << d;
    EXPECT_NE(d.find("bwd "), std::string::npos) << d;
    // Each pass is checked at the tolerance of the implementation it kept: the fp32 one against
    // the exact inputs, gemm and cudnn against their bf16 rounding.
    const AttnTolerance kept{.gemm = d.find("fwd fp32") == std::string::npos,
                             .gemm_bwd = d.find("bwd fp32") == std::string::npos};
    attention_case(*be, c, 20, kept);  // the cached picks
    EXPECT_EQ(be->description(), d);
  }
  if (gpus == 0) GTEST_SKIP() << "no CUDA backend: auto has nothing to choose between";
}

// A forced cudnn runs gemm where cuDNN has no plan, so the cuda_N_cudnn tests alone would pass on
// gemm if every plan failed. Here each shape cuDNN should serve (head dims 64 and 128, MHA, GQA,
// MQA, causal and windowed) must be counted as run on cudnn, forward and backward, and pass the
// bf16 tolerances. Skipped without a GPU or without cuDNN (bench/gpu_check.sh counts a skip as a
// failure).
static int cudnn_count(const std::string& desc, const char* pass) {
  const std::string tag = std::string(pass) + " cudnn ";
  const size_t at = desc.find(tag);
  return at == std::string::npos ? 0 : std::atoi(desc.c_str() + at + tag.size());
}

TEST(BackendAttentionCudnn, ServedShapesRunOnCudnn) {
  const cuda::CudnnLoad& lib = cuda::cudnn_library();
  int gpus = 0;
  for (const std::string& n : available_backends()) {
    if (!n.starts_with("cuda:")) continue;
    ++gpus;
    if (!lib.api) GTEST_SKIP() << cuda::cudnn_info_line(lib);
    std::shared_ptr<Backend> be = make_cuda_backend(std::stoi(n.substr(5)), "cudnn");
    // T values no other attention test uses, so each shape is new to the backend.
    for (AttnCase c : {AttnCase{1, 4, 2, 136, 64}, AttnCase{2, 2, 2, 136, 128},
                       AttnCase{1, 4, 1, 264, 64, 50}, AttnCase{1, 2, 2, 264, 128, 100}}) {
      SCOPED_TRACE(testing::Message() << "B" << c.B << " H" << c.H << " Hkv" << c.Hkv << " T" << c.T
                                      << " hd" << c.hd << " window " << c.window);
      const std::string before = be->description();
      attention_case(*be, c, 10, AttnTolerance{.gemm = true, .gemm_bwd = true});
      const std::string after = be->description();
      EXPECT_EQ(cudnn_count(after, "fwd"), cudnn_count(before, "fwd") + 1) << after;
      EXPECT_EQ(cudnn_count(after, "bwd"), cudnn_count(before, "bwd") + 1) << after;
    }
  }
  if (gpus == 0) GTEST_SKIP() << "no CUDA backend: no cuDNN attention to run";
}

// =================================================================================================
// MLP activations
// =================================================================================================
// float64 reference: h [N, Hd] ([N, 2Hd] = [up | gate] for SwiGLU) -> y [N, Hd].
static VecD act_ref(Activation a, const VecD& h, int64_t N, int64_t Hd) {
  VecD y(N * Hd);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < Hd; ++i) {
      if (a == Activation::SwiGLU) {
        double u = h[r * 2 * Hd + i], g = h[r * 2 * Hd + Hd + i];
        y[r * Hd + i] = u * g / (1 + std::exp(-g));
        continue;
      }
      double v = h[r * Hd + i];
      y[r * Hd + i] = a == Activation::ReLU2
                          ? (v > 0 ? v * v : 0.0)
                          : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    }
  return y;
}

TEST_P(BackendOps, Activations) {
  // Forward: fp32 exp/tanh of O(1) arguments, a few ulp: 2e-6 absolute + relative (relu2 reaches
  // ~60 at 4 sigma). Backward: within 1e-5 of the finite differences. bf16 outputs add their
  // rounding.
  Backend& b = be();
  struct Case { int64_t N, Hd; int samples; };
  for (Activation a : {Activation::ReLU2, Activation::GELU, Activation::SwiGLU})
    for (Case c : {Case{7, 43, -1}, Case{33, 515, 300}})
      for (DType ot : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(testing::Message() << "act" << int(a) << " N" << c.N << " Hd" << c.Hd << " "
                                        << dtype_name(ot));
        const int64_t nh = c.N * c.Hd * (a == Activation::SwiGLU ? 2 : 1), ny = c.N * c.Hd;
        VecF h = randn(nh, 81 + c.N, 2.0f), R = randn(ny, 82);
        Dev<float> hd(b, h), Rd(b, R);
        const double extra = ot == DType::BF16 ? kBf16Rel : 0.0;
        VecF y = run_with_output(b, ot, ny, [&](void* out) { b.activation_fwd(a, hd.p(), out, ot, c.N, c.Hd); });
        expect_close(y, act_ref(a, to_d(h), c.N, c.Hd), 2e-6, 2e-6 + extra, "y");
        VecF dh = run_with_output(b, ot, nh, [&](void* out) {
          b.activation_bwd(a, hd.p(), Rd.p(), out, ot, c.N, c.Hd);
        });
        check_grad([&](const VecD& x) { return dot(act_ref(a, x, c.N, c.Hd), R); }, h, dh, 1e-5,
                   c.samples, "dh", extra);
      }
}

// =================================================================================================
// Element-wise: residual, scale, axpy
// =================================================================================================
TEST_P(BackendOps, ResidualScaleAxpy) {
  // One fp32 operation per element is correctly rounded on any IEEE device: residual and scale are
  // exact. axpy may fuse a*x + y into one FMA or round a*x first: within 2^-23 (|y| + |a x|).
  Backend& b = be();
  for (int64_t n : {int64_t(1), int64_t(1001), int64_t(70001)}) {
    SCOPED_TRACE(n);
    VecF x = randn(n, 91), y = randn(n, 92);
    Dev<float> xd(b, x), yd(b, y);
    Dev<float> o = nan_out(b, n);
    b.residual_fwd(xd.p(), yd.p(), o.p(), n);
    VecF want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = x[i] + y[i];
    expect_same(o.get(), want, "residual");

    b.scale(o.p(), -0.37f, n);
    for (auto& v : want) v *= -0.37f;
    expect_same(o.get(), want, "scale");

    const float a = 0.731f;
    b.axpy(yd.p(), a, xd.p(), n);
    VecD ref(n), sc(n);
    for (int64_t i = 0; i < n; ++i) {
      ref[i] = double(y[i]) + double(a) * x[i];
      sc[i] = std::abs(double(y[i])) + std::abs(double(a) * x[i]);
    }
    expect_close(yd.get(), ref, 1e-30, 2 * kU32, "axpy", &sc);
    expect_same(xd.get(), x, "axpy leaves x");
  }
}

// The element-wise ops on views that start at any element (a device may move several elements a
// load where the pointers allow it, one otherwise): at each start offset and for lengths that are
// and are not multiples of a vector, the result is the offset-0 result bit for bit, and nothing
// outside the view is written.
TEST_P(BackendOps, ElementWiseOpsAtAnyAlignment) {
  Backend& b = be();
  constexpr int64_t kGuard = 5;
  // Runs `op(in0, in1, out, n)` on views at offset `off` into buffers of inputs x, y and a NaN
  // output of element type Out; returns the view's output as fp32 after checking the guards.
  auto run_at = [&]<typename Out>(int64_t off, const VecF& x, const VecF& y, Out guard,
                                  const std::function<void(const float*, const float*, Out*, int64_t)>& op) {
    const int64_t n = int64_t(x.size());
    auto padded = [&](const VecF& v) {
      VecF p(size_t(off + n + kGuard), 0.5f);
      std::copy(v.begin(), v.end(), p.begin() + off);
      return p;
    };
    Dev<float> xd(b, padded(x)), yd(b, padded(y));
    Dev<Out> od(b, std::vector<Out>(size_t(off + n + kGuard), guard));
    op(xd.p() + off, yd.p() + off, od.p() + off, n);
    const std::vector<Out> o = od.get();
    for (int64_t i = 0; i < off; ++i) EXPECT_EQ(std::memcmp(&o[size_t(i)], &guard, sizeof(Out)), 0) << "before " << i;
    for (int64_t i = off + n; i < off + n + kGuard; ++i)
      EXPECT_EQ(std::memcmp(&o[size_t(i)], &guard, sizeof(Out)), 0) << "after " << i - off - n;
    VecF out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<Out, bf16>) out[size_t(i)] = bf16_to_f32(o[size_t(off + i)]);
      else out[size_t(i)] = o[size_t(off + i)];
    }
    return out;
  };
  using F32Op = std::function<void(const float*, const float*, float*, int64_t)>;
  using Bf16Op = std::function<void(const float*, const float*, bf16*, int64_t)>;
  const Dev<float> w(b, VecF{0.75f, -1.25f});
  const std::vector<std::pair<const char*, F32Op>> f32_ops = {
      {"residual", [&](const float* x, const float* y, float* o, int64_t n) { b.residual_fwd(x, y, o, n); }},
      {"mix2", [&](const float* x, const float* y, float* o, int64_t n) { b.mix2_fwd(x, y, w.p(), o, n); }},
      {"scale", [&](const float* x, const float*, float* o, int64_t n) {
         b.residual_fwd(x, x, o, n);  // o = 2x, then scaled in place
         b.scale(o, -0.37f, n);
       }},
      {"axpy", [&](const float* x, const float* y, float* o, int64_t n) {
         b.residual_fwd(y, y, o, n);
         b.axpy(o, 0.731f, x, n);
       }},
      {"softcap", [&](const float* x, const float* y, float* o, int64_t n) {
         b.residual_fwd(x, y, o, n);
         b.softcap_fwd(o, n, 2.0f);
       }},
      {"relu2", [&](const float* x, const float*, float* o, int64_t n) {
         b.activation_fwd(Activation::ReLU2, x, o, DType::F32, 1, n);
       }},
      {"gelu'", [&](const float* x, const float* y, float* o, int64_t n) {
         b.activation_bwd(Activation::GELU, x, y, o, DType::F32, 1, n);
       }},
  };
  const std::vector<std::pair<const char*, Bf16Op>> bf16_ops = {
      {"to bf16", [&](const float* x, const float*, bf16* o, int64_t n) { b.f32_to_bf16(x, o, n); }},
      {"gelu bf16", [&](const float* x, const float*, bf16* o, int64_t n) {
         b.activation_fwd(Activation::GELU, x, o, DType::BF16, 1, n);
       }},
      {"relu2' bf16", [&](const float* x, const float* y, bf16* o, int64_t n) {
         b.activation_bwd(Activation::ReLU2, x, y, o, DType::BF16, 1, n);
       }},
  };
  for (int64_t n : {int64_t(5), int64_t(4099)}) {
    const VecF x = randn(size_t(n), 141, 2.0f), y = randn(size_t(n), 142);
    for (const auto& [name, op] : f32_ops) {
      SCOPED_TRACE(testing::Message() << name << " n" << n);
      const VecF want = run_at.template operator()<float>(0, x, y, kNaN, op);
      for (int64_t off : {1, 2, 3, 4}) expect_same(run_at.template operator()<float>(off, x, y, kNaN, op), want, "offset");
    }
    for (const auto& [name, op] : bf16_ops) {
      SCOPED_TRACE(testing::Message() << name << " n" << n);
      const VecF want = run_at.template operator()<bf16>(0, x, y, kBf16NaN, op);
      for (int64_t off : {1, 2, 3, 4}) expect_same(run_at.template operator()<bf16>(off, x, y, kBf16NaN, op), want, "offset");
    }
  }
  // bf16 -> fp32 reads four elements as 8 bytes: views of a bf16 buffer at every offset.
  for (int64_t n : {int64_t(5), int64_t(4099)})
    for (int64_t off : {0, 1, 2, 3, 4}) {
      SCOPED_TRACE(testing::Message() << "to fp32 n" << n << " offset " << off);
      const VecH h = bf16_bits(randn(size_t(n), 143, 3.0f));
      VecH hp(size_t(off + n + kGuard), 0x3f80);
      std::copy(h.begin(), h.end(), hp.begin() + off);
      Dev<bf16> hd(b, hp);
      Dev<float> od = nan_out(b, size_t(off + n + kGuard));
      b.bf16_to_f32(hd.p() + off, od.p() + off, n);
      const VecF o = od.get();
      for (int64_t i = 0; i < off + n + kGuard; ++i) {
        if (i < off || i >= off + n) EXPECT_TRUE(std::isnan(o[size_t(i)])) << "outside the view: " << i;
        else ASSERT_EQ(o[size_t(i)], bf16_to_f32(h[size_t(i - off)])) << i;
      }
    }
}

// =================================================================================================
// Softcapped cross-entropy, softcap
// =================================================================================================
// float64 loss of one row (0 for an ignored target); `best`/`gap`: the argmax over the real
// vocabulary (first on ties) and its margin over the runner-up.
static double xent_ref(const VecD& z, int64_t n, int V, int Vp, double cap, int32_t tg,
                       int* best = nullptr, double* gap = nullptr) {
  VecD s(V);
  double mx = -1e300, second = -1e300;
  int am = 0;
  for (int j = 0; j < V; ++j) {
    s[j] = cap > 0 ? cap * std::tanh(z[n * Vp + j] / cap) : z[n * Vp + j];
    if (s[j] > mx) {
      second = mx;
      mx = s[j];
      am = j;
    } else if (s[j] > second) {
      second = s[j];
    }
  }
  if (best) *best = am;
  if (gap) *gap = mx - second;
  double sum = 0;
  for (int j = 0; j < V; ++j) sum += std::exp(s[j] - mx);
  return tg >= 0 ? mx + std::log(sum) - s[tg] : 0.0;
}

TEST_P(BackendOps, SoftcapXent) {
  // Losses: fp32 log-sum-exp of values up to ~|cap|, 1e-5 + 2e-6 relative. Gradient: FD of the
  // float64 loss, 1e-5 (the probabilities are accurate to a few ulp). Measured on the CPU kernel
  // against float64 over 64 rows of 8192 (caps 2 to 40, every variant): loss error <= 9.8e-6,
  // gradient error <= 7.1e-7 (bench/RESULTS.md, "softcap_xent reads the logits once"). The padding columns and
  // ignored rows get an exact 0 gradient.
  Backend& b = be();
  struct Case { int64_t N; int V, Vp; float zscale; };
  for (Case c : {Case{9, 70, 128, 4.0f}, Case{5, 1000, 1024, 3.0f}})
    for (float cap : {0.0f, 15.0f, 2.0f, 40.0f, 50.0f}) {  // above 40: the path shifted by the row max
      SCOPED_TRACE(testing::Message() << "N" << c.N << " V" << c.V << " Vp" << c.Vp << " cap" << cap);
      const int64_t N = c.N;
      const int V = c.V, Vp = c.Vp;
      VecF z = randn(N * Vp, 101 + V, c.zscale);
      VecI tg = {3, V - 1, 0, -1, 17, 17, 44, -1, 5};
      tg.resize(N);
      // row 1: an exact tie for the maximum, which argmax resolves to the first index
      z[1 * Vp + 5] = z[1 * Vp + 40] = 30.0f;
      // row 0: padding far above the real logits; counted anywhere, it would dominate
      for (int j = V; j < Vp; ++j) z[j] = 100.0f;
      const VecD zd = to_d(z);
      VecD lref(N);
      double tref = 0;
      for (int64_t n = 0; n < N; ++n) {
        lref[n] = xent_ref(zd, n, V, Vp, cap, tg[n]);
        tref += lref[n];
      }
      auto check_argmax = [&](const VecI& am) {
        for (int64_t n = 0; n < N; ++n) {
          int best;
          double gap;
          xent_ref(zd, n, V, Vp, cap, tg[n], &best, &gap);
          if (gap == 0 || gap > 1e-4) {  // else an fp32 near-tie
            EXPECT_EQ(am[n], best) << "row " << n;
          }
        }
      };
      Dev<int32_t> tgd(b, tg);
      const float gs = 0.37f;
      // The summed loss is added to a device double (an accumulator, starting here at 0.5).
      auto xent_total = [&](const SoftcapXentArgs& a0) {
        Dev<double> acc(b, VecD{0.5});
        SoftcapXentArgs a = a0;
        a.loss_sum = acc.p();
        b.softcap_xent(a);
        return acc.get()[0] - 0.5;
      };
      {  // with the gradient
        Dev<float> zl(b, z);
        Dev<float> loss = nan_out(b, N);
        Dev<int32_t> am(b, VecI(N, -7));
        double total = xent_total({.N = N, .V = V, .Vp = Vp, .cap = cap, .logits = zl.p(), .targets = tgd.p(),
                                   .loss = loss.p(), .argmax = am.p(), .want_grad = true, .grad_scale = gs});
        VecF l = loss.get();
        expect_close(l, lref, 1e-5, 2e-6, "loss");
        for (int64_t n = 0; n < N; ++n)
          if (tg[n] < 0) {
            EXPECT_EQ(l[n], 0.0f) << "ignored row " << n;
          }
        EXPECT_NEAR(total, tref, 1e-5 * N + 2e-6 * std::abs(tref));
        check_argmax(am.get());
        VecF g = zl.get();
        for (int64_t n = 0; n < N; ++n)
          for (int j = 0; j < Vp; ++j)
            if (j >= V || tg[n] < 0) {
              ASSERT_EQ(g[n * Vp + j], 0.0f) << n << " " << j;
            }
        check_grad(
            [&](const VecD& zz) {
              double s = 0;
              for (int64_t n = 0; n < N; ++n) s += xent_ref(zz, n, V, Vp, cap, tg[n]);
              return gs * s;
            },
            z, g, 1e-5, 300, "dlogits");
        // With grad_bf16 the gradient goes there instead: the fp32 gradient rounded to nearest even,
        // every element (padding and ignored rows included), and the same losses, bit for bit.
        Dev<float> zl2(b, z);
        Dev<float> loss2 = nan_out(b, N);
        Dev<bf16> gh(b, VecH(size_t(N * Vp), kBf16NaN));
        double total2 = xent_total({.N = N, .V = V, .Vp = Vp, .cap = cap, .logits = zl2.p(), .targets = tgd.p(),
                                    .loss = loss2.p(), .argmax = nullptr, .want_grad = true, .grad_scale = gs,
                                    .grad_bf16 = gh.p()});
        EXPECT_EQ(total2, total);
        expect_same(loss2.get(), l, "loss with grad_bf16");
        const VecH h = gh.get();
        for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(h[i], f32_to_bf16(g[i])) << "element " << i;
        // Rows ld > Vp apart: each row's loss and gradient the same bits as packed, the columns from
        // Vp to ld untouched (in the logits and in the bf16 gradient).
        const int64_t ld = Vp + 16;
        VecF zs(size_t(N * ld), 777.0f);
        for (int64_t n = 0; n < N; ++n)
          for (int j = 0; j < Vp; ++j) zs[size_t(n * ld + j)] = z[size_t(n * Vp + j)];
        for (bool to_bf16 : {false, true}) {
          Dev<float> zl4(b, zs), loss4 = nan_out(b, N);
          Dev<bf16> gh4(b, VecH(size_t(N * ld), kBf16NaN));
          double total4 = xent_total({.N = N, .V = V, .Vp = Vp, .cap = cap, .logits = zl4.p(), .targets = tgd.p(),
                                      .loss = loss4.p(), .want_grad = true, .grad_scale = gs,
                                      .grad_bf16 = to_bf16 ? gh4.p() : nullptr, .ld = ld});
          EXPECT_EQ(total4, total);
          expect_same(loss4.get(), l, "loss at row stride ld");
          const VecF g4 = zl4.get();
          const VecH h4 = gh4.get();
          for (int64_t n = 0; n < N; ++n)
            for (int64_t j = 0; j < ld; ++j) {
              const size_t i = size_t(n * ld + j);
              if (j >= Vp) {
                ASSERT_EQ(g4[i], 777.0f) << "padding " << n << " " << j;
                ASSERT_EQ(h4[i], kBf16NaN) << "bf16 padding " << n << " " << j;
              } else if (to_bf16) {
                ASSERT_EQ(h4[i], h[size_t(n * Vp + j)]) << "bf16 gradient at stride " << n << " " << j;
              } else {
                ASSERT_EQ(g4[i], g[size_t(n * Vp + j)]) << "gradient at stride " << n << " " << j;
              }
            }
        }
      }
      {  // without it: the same loss, argmax and total
        Dev<float> zl(b, z);
        Dev<float> loss = nan_out(b, N);
        Dev<int32_t> am(b, VecI(N, -7));
        double total = xent_total({.N = N, .V = V, .Vp = Vp, .cap = cap, .logits = zl.p(), .targets = tgd.p(),
                                   .loss = loss.p(), .argmax = am.p(), .want_grad = false, .grad_scale = 1.0f});
        expect_close(loss.get(), lref, 1e-5, 2e-6, "loss (no grad)");
        EXPECT_NEAR(total, tref, 1e-5 * N + 2e-6 * std::abs(tref));
        check_argmax(am.get());
        Dev<float> zl2(b, z);  // loss and argmax may be null
        double t2 = xent_total({.N = N, .V = V, .Vp = Vp, .cap = cap, .logits = zl2.p(), .targets = tgd.p(),
                                .loss = nullptr, .argmax = nullptr, .want_grad = false, .grad_scale = 1.0f});
        EXPECT_NEAR(t2, tref, 1e-5 * N + 2e-6 * std::abs(tref));
        Dev<float> zl3(b, z), loss3 = nan_out(b, N);  // no accumulator: the rows' losses alone
        b.softcap_xent({.N = N, .V = V, .Vp = Vp, .cap = cap, .logits = zl3.p(), .targets = tgd.p(),
                        .loss = loss3.p(), .want_grad = false, .grad_scale = 1.0f});
        expect_close(loss3.get(), lref, 1e-5, 2e-6, "loss (no accumulator)");
      }
      {  // no targets at all: every row is ignored, argmax still reported
        Dev<float> zl(b, z);
        Dev<float> loss = nan_out(b, N);
        Dev<int32_t> am(b, VecI(N, -7));
        double total = xent_total({.N = N, .V = V, .Vp = Vp, .cap = cap, .logits = zl.p(), .targets = nullptr,
                                   .loss = loss.p(), .argmax = am.p(), .want_grad = false, .grad_scale = 1.0f});
        EXPECT_EQ(total, 0.0);
        for (float v : loss.get()) EXPECT_EQ(v, 0.0f);
        check_argmax(am.get());
      }
    }
}

TEST_P(BackendOps, SoftcapFwd) {
  // cap * tanh(z / cap) in fp32: tanh of O(1) arguments to ~1e-7, scaled by cap. cap <= 0 is a no-op.
  for (float cap : {15.0f, 2.0f, 0.0f, -1.0f}) {
    SCOPED_TRACE(cap);
    VecF z = randn(5001, 131, 6.0f);
    Dev<float> zd(be(), z);
    be().softcap_fwd(zd.p(), int64_t(z.size()), cap);
    if (cap <= 0) {
      expect_same(zd.get(), z, "z unchanged");
      continue;
    }
    VecD ref(z.size());
    for (size_t i = 0; i < z.size(); ++i) ref[i] = cap * std::tanh(double(z[i]) / cap);
    expect_close(zd.get(), ref, 2e-7 * cap, 2e-7, "s");
  }
}

// =================================================================================================
// Optimizer kernels
// =================================================================================================
TEST_P(BackendOps, SumSquaresMany) {
  // Accumulated in double: relative error ~n * 1e-16 in any order. (That the CPU gets the same bits
  // for every thread count is a property of its kernel, tested in test_optim.) All arrays in one
  // call, the sums written to device doubles (NaN before), the slot after them untouched.
  const std::vector<int64_t> sizes = {0, 1, 1000, 100003, 300001};
  std::vector<Dev<float>> xs;
  std::vector<const float*> ptrs;
  VecD ref;
  for (int64_t n : sizes) {
    VecF x = randn(n, 141 + n);
    double r = 0;
    for (float v : x) r += double(v) * v;
    ref.push_back(r);
    xs.emplace_back(be(), x);
    ptrs.push_back(xs.back().p());
  }
  Dev<double> out(be(), VecD(sizes.size() + 1, std::nan("")));
  be().sum_squares_many(ptrs.data(), sizes.data(), int(sizes.size()), out.p());
  const VecD got = out.get();
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-11 * ref[i]) << sizes[i];
  EXPECT_TRUE(std::isnan(got.back()));
}

TEST_P(BackendOps, GradClip) {
  // From per-parameter sums: the sum in order, its square root rounded to float, the clip scale in
  // float, the finite flag over the norm and the checked values. The norm's bits are the host
  // formula's (float(sqrt(sum in order))), on every backend: double addition and sqrt are exact
  // IEEE operations.
  Backend& b = be();
  const VecD part = {3.25, 1e-3, 0.0, 41.5, 7.0 / 3.0};
  double ss = 0;
  for (double v : part) ss += v;
  const float norm = float(std::sqrt(ss));
  Dev<double> pd(b, part), checks(b, VecD{1.5, -2.0}), bad(b, VecD{1.5, std::nan("")}),
      inf_part(b, VecD{1.0, HUGE_VAL});
  auto clip = [&](const Dev<double>& p, float max_norm, const Dev<double>* c) {
    Dev<GradClip> out(b, std::vector<GradClip>{{.norm = -1, .gscale = -1, .finite = 7}});
    b.grad_clip({.count = int(p.size()), .part = p.p(), .max_norm = max_norm, .checks = c ? c->p() : nullptr,
                 .n_checks = c ? int(c->size()) : 0, .out = out.p()});
    return out.get()[0];
  };
  GradClip g = clip(pd, 0.0f, nullptr);  // no clipping
  EXPECT_TRUE(same_bits(g.norm, norm));
  EXPECT_EQ(g.gscale, 1.0f);
  EXPECT_EQ(g.finite, 1);
  g = clip(pd, 100.0f, &checks);  // below the limit
  EXPECT_EQ(g.gscale, 1.0f);
  EXPECT_EQ(g.finite, 1);
  g = clip(pd, 1.0f, &checks);  // clipped: limit / (norm + 1e-6) in float
  EXPECT_TRUE(same_bits(g.gscale, 1.0f / (norm + 1e-6f)));
  EXPECT_NEAR(double(g.gscale) * std::sqrt(ss), 1.0, 1e-6);
  EXPECT_EQ(g.finite, 1);
  g = clip(pd, 1.0f, &bad);  // a NaN loss: no update, the norm still reported
  EXPECT_TRUE(same_bits(g.norm, norm));
  EXPECT_EQ(g.finite, 0);
  g = clip(inf_part, 1.0f, nullptr);  // an infinite gradient
  EXPECT_TRUE(std::isinf(g.norm));
  EXPECT_EQ(g.finite, 0);
}

// The step scalars of the optimizer ops in device memory: a GradClip and a GroupStep.
struct StepDev {
  Dev<GradClip> clip;
  Dev<GroupStep> step;
  StepDev(Backend& b, float gscale, GroupStep gs, bool finite = true)
      : clip(b, std::vector<GradClip>{{.norm = 1, .gscale = gscale, .finite = finite ? 1 : 0}}),
        step(b, std::vector<GroupStep>{gs}) {}
};

TEST_P(BackendOps, AdamWUpdate) {
  // Three steps against the textbook step in float64:
  //   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  g = grad * gscale
  //   p = p (1 - lr wd) - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
  // fp32 state: m and v to 1e-6 of the magnitude of their terms (m's terms can cancel); p to
  // 1e-6 (an update is ~lr = 1e-2, so a missing bias correction or decay term is off by 1e-3 or
  // more). Cautious: the decay only where m (the update's sign) and p agree in sign.
  Backend& b = be();
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.5f;
  for (bool cautious : {false, true})
  for (int64_t n : {int64_t(1000), int64_t(70001)}) {
    SCOPED_TRACE(testing::Message() << "n " << n << " cautious " << cautious);
    VecF p = randn(n, 151);
    Dev<float> pd(b, p), md(b, VecF(n, 0.0f)), vd(b, VecF(n, 0.0f));
    VecD P = to_d(p), M(n, 0.0), Vv(n, 0.0), Ms(n, 0.0);
    for (int64_t t = 1; t <= 3; ++t) {
      VecF g = randn(n, 152 + t);
      for (int64_t i = 0; i < n; i += 17) g[i] = 0.0f;          // no gradient: eps decides
      for (int64_t i = 5; i < n; i += 23) g[i] *= 1e-6f;        // tiny: sqrt(v) ~ eps
      Dev<float> gd(b, g);
      const StepDev sd(b, gscale, {.lr = lr, .wd = wd, .t = t});
      b.adamw_update({.n = n, .p = pd.p(), .grad = gd.p(), .clip = sd.clip.p(), .step = sd.step.p(), .m = md.p(),
                      .v = vd.p(), .hyper = {.beta1 = b1, .beta2 = b2, .eps = eps, .cautious = cautious}});
      const double bc1 = 1 - std::pow(double(b1), double(t)), bc2 = 1 - std::pow(double(b2), double(t));
      for (int64_t i = 0; i < n; ++i) {
        double gg = double(g[i]) * gscale;
        Ms[i] = double(b1) * Ms[i] + (1 - double(b1)) * std::abs(gg);  // carried like m, without signs
        M[i] = double(b1) * M[i] + (1 - double(b1)) * gg;
        Vv[i] = double(b2) * Vv[i] + (1 - double(b2)) * gg * gg;
        const double decay = cautious && !(M[i] * P[i] > 0) ? 1.0 : 1 - double(lr) * wd;
        P[i] = P[i] * decay - double(lr) * (M[i] / bc1) / (std::sqrt(Vv[i] / bc2) + eps);
      }
      SCOPED_TRACE(t);
      expect_close(md.get(), M, 1e-20, 1e-6, "m", &Ms);
      expect_close(vd.get(), Vv, 1e-30, 1e-6, "v");
      expect_close(pd.get(), P, 1e-6, 1e-6, "p");
    }
  }
}

TEST_P(BackendOps, MuonMomentumAndApply) {
  // buf = mu buf + g; u = nesterov ? g + mu buf : buf (g = grad * gscale);
  // p = p (1 - lr wd) - lr scale o. A few fp32 roundings: 1e-6 of the magnitude of the terms
  // (which can cancel) + 1e-7.
  Backend& b = be();
  const float mu = 0.95f, gscale = 0.7f;
  for (bool nesterov : {false, true})
    for (int64_t n : {int64_t(999), int64_t(70001)}) {
      SCOPED_TRACE(testing::Message() << "nesterov " << nesterov << " n " << n);
      VecF buf0 = randn(n, 161);
      Dev<float> bufd(b, buf0);
      VecD B = to_d(buf0), Bs(n);
      for (int64_t i = 0; i < n; ++i) Bs[i] = std::abs(B[i]);
      for (int step = 0; step < 2; ++step) {
        VecF g = randn(n, 162 + step);
        Dev<float> gd(b, g);
        Dev<float> u = nan_out(b, n);
        const StepDev sd(b, gscale, {.mu = mu});
        b.muon_momentum({.n = n, .grad = gd.p(), .clip = sd.clip.p(), .step = sd.step.p(), .nesterov = nesterov,
                         .buf = bufd.p(), .u = u.p()});
        VecD U(n), Us(n);
        for (int64_t i = 0; i < n; ++i) {
          double gg = double(g[i]) * gscale;
          Bs[i] = double(mu) * Bs[i] + std::abs(gg);  // carried like buf, without signs
          B[i] = double(mu) * B[i] + gg;
          U[i] = nesterov ? gg + double(mu) * B[i] : B[i];
          Us[i] = nesterov ? std::abs(gg) + double(mu) * Bs[i] : Bs[i];
        }
        expect_close(bufd.get(), B, 1e-7, 1e-6, "buf", &Bs);
        expect_close(u.get(), U, 1e-7, 1e-6, "u", &Us);
      }
      // Cautious: the decay only where o (the update's sign) and p agree in sign.
      for (bool cautious : {false, true}) {
        SCOPED_TRACE(cautious ? "cautious" : "plain");
        VecF p = randn(n, 163), o = randn(n, 164);
        Dev<float> pd(b, p), od(b, o);
        const float lr = 0.02f, sc = 1.5f, wd = 0.1f;
        const StepDev sd(b, 1.0f, {.lr = lr, .wd = wd});
        b.muon_apply({.n = n, .p = pd.p(), .o = od.p(), .clip = sd.clip.p(), .step = sd.step.p(), .scale = sc,
                      .cautious = cautious});
        VecD P(n), Ps(n);
        for (int64_t i = 0; i < n; ++i) {
          const double decay = cautious && !(double(o[i]) * p[i] > 0) ? 1.0 : 1 - double(lr) * wd;
          P[i] = p[i] * decay - double(lr) * sc * o[i];
          Ps[i] = std::abs(p[i] * decay) + std::abs(double(lr) * sc * o[i]);
        }
        expect_close(pd.get(), P, 1e-7, 1e-6, "p", &Ps);
      }
    }
}

TEST_P(BackendOps, Mix2ForwardAndBackward) {
  // out = w0 x + w1 x0; backward: dw += (sum dout x, sum dout x0), dx0 += w1 dout, dx = w0 dout, with
  // dx aliasing dout as the model calls it. Sizes below and above one 16K chunk and the threading
  // threshold; float64 reference.
  Backend& b = be();
  for (int64_t n : {int64_t(1000), int64_t(70001)}) {
    SCOPED_TRACE(n);
    VecF x = randn(n, 181), x0 = randn(n, 182), dout = randn(n, 183), dx0_init = randn(n, 184);
    const VecF w = {0.8f, -0.35f}, dw_init = {0.25f, -1.5f};
    Dev<float> xd(b, x), x0d(b, x0), wd(b, w);
    Dev<float> out = nan_out(b, n);
    b.mix2_fwd(xd.p(), x0d.p(), wd.p(), out.p(), n);
    VecD O(n), Os(n);
    for (int64_t i = 0; i < n; ++i) {
      O[size_t(i)] = double(w[0]) * x[size_t(i)] + double(w[1]) * x0[size_t(i)];
      Os[size_t(i)] = std::abs(double(w[0]) * x[size_t(i)]) + std::abs(double(w[1]) * x0[size_t(i)]);
    }
    expect_close(out.get(), O, 1e-7, 1e-6, "out", &Os);
    Dev<float> gd(b, dout), dx0d(b, dx0_init), dwd(b, dw_init);
    b.mix2_bwd({.n = n, .dout = gd.p(), .x = xd.p(), .x0 = x0d.p(), .w = wd.p(), .dx = gd.p(), .dx0 = dx0d.p(),
                .dw = dwd.p()});
    double s0 = 0, s1 = 0, a0 = 0, a1 = 0;
    VecD DX(n), DX0(n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = dout[size_t(i)];
      s0 += g * x[size_t(i)], s1 += g * x0[size_t(i)];
      a0 += std::abs(g * x[size_t(i)]), a1 += std::abs(g * x0[size_t(i)]);
      DX[size_t(i)] = double(w[0]) * g;
      DX0[size_t(i)] = dx0_init[size_t(i)] + double(w[1]) * g;
    }
    expect_close(gd.get(), DX, 1e-7, 1e-6, "dx");
    expect_close(dx0d.get(), DX0, 1e-7, 1e-6, "dx0");
    const VecF dw = dwd.get();
    EXPECT_NEAR(dw[0], dw_init[0] + s0, 1e-6 * (a0 + 1));
    EXPECT_NEAR(dw[1], dw_init[1] + s1, 1e-6 * (a1 + 1));
  }
}

TEST_P(BackendOps, NorMuonScale) {
  // Two steps (v carried) against float64: v = b2 v + (1-b2) mean_c o^2, o[r] /= sqrt(v[r]) + eps,
  // then o rescaled to its Frobenius norm before. A zero row keeps v at 0 and o at 0; wide and tall
  // shapes, one large enough for the threaded path.
  Backend& b = be();
  const float b2 = 0.95f, eps = 1e-8f;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 33}, {40, 9}, {300, 256}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    VecF v0(size_t(rows), 0.0f);
    Dev<float> vd(b, v0);
    VecD V(size_t(rows), 0.0);
    for (int step = 0; step < 2; ++step) {
      VecF o = randn(rows * cols, 171 + step);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) o[size_t(r * cols + c)] *= float(1 + r % 4);
      for (int64_t c = 0; c < cols; ++c) o[size_t(cols + c)] = 0.0f;  // row 1 all zero
      Dev<float> od(b, o);
      const StepDev sd(b, 1.0f, {});
      b.normuon_scale({.rows = rows, .cols = cols, .o = od.p(), .v = vd.p(), .beta2 = b2, .eps = eps,
                       .clip = sd.clip.p()});
      VecD O = to_d(o), ss(size_t(rows), 0.0);
      double before = 0, after = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) ss[size_t(r)] += O[size_t(r * cols + c)] * O[size_t(r * cols + c)];
        V[size_t(r)] = b2 * V[size_t(r)] + (1 - double(b2)) * ss[size_t(r)] / double(cols);
        const double d = std::sqrt(V[size_t(r)]) + eps;
        before += ss[size_t(r)], after += ss[size_t(r)] / (d * d);
      }
      const double f = std::sqrt(before / after);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) O[size_t(r * cols + c)] *= f / (std::sqrt(V[size_t(r)]) + eps);
      SCOPED_TRACE(step);
      expect_close(vd.get(), V, 1e-12, 1e-5, "v");
      expect_close(od.get(), O, 1e-7, 1e-5, "o");
    }
  }
}

TEST_P(BackendOps, UpdateOpsSkipWhenNotFinite) {
  // With the clip's finite flag 0 every update op leaves its parameters and state as they were
  // (bit for bit), even with a NaN gradient and a NaN clip scale; the same ops with the flag 1
  // change them (so the check can fail).
  Backend& b = be();
  const int64_t rows = 30, cols = 40, n = rows * cols;
  VecF g = randn(n, 191), p0 = randn(n, 192), s0 = randn(n, 193), o0 = randn(n, 194), v0(rows, 0.5f);
  g[7] = kNaN;
  for (bool finite : {false, true}) {
    SCOPED_TRACE(finite ? "finite" : "not finite");
    const StepDev sd(b, finite ? 0.5f : kNaN, {.lr = 0.01f, .wd = 0.1f, .mu = 0.9f, .t = 2}, finite);
    Dev<float> gd(b, finite ? randn(n, 195) : g), pd(b, p0), md(b, s0), vd(b, VecF(n, 1.0f)), bufd(b, s0),
        ud(b, o0), od(b, o0), nv(b, v0);
    b.adamw_update({.n = n, .p = pd.p(), .grad = gd.p(), .clip = sd.clip.p(), .step = sd.step.p(), .m = md.p(),
                    .v = vd.p(), .hyper = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f}});
    b.muon_momentum({.n = n, .grad = gd.p(), .clip = sd.clip.p(), .step = sd.step.p(), .nesterov = true,
                     .buf = bufd.p(), .u = ud.p()});
    b.normuon_scale({.rows = rows, .cols = cols, .o = od.p(), .v = nv.p(), .beta2 = 0.95f, .eps = 1e-8f,
                     .clip = sd.clip.p()});
    Dev<float> pm(b, p0);
    b.muon_apply({.n = n, .p = pm.p(), .o = od.p(), .clip = sd.clip.p(), .step = sd.step.p()});
    const bool same = pd.get() == p0 && md.get() == s0 && vd.get() == VecF(n, 1.0f) && bufd.get() == s0 &&
                      ud.get() == o0 && od.get() == o0 && nv.get() == v0 && pm.get() == p0;
    EXPECT_EQ(same, !finite);
  }
}

// float64 reference of the Newton-Schulz quintic: X = G / ||G||_F on the short side (transposed
// when rows > cols), then `steps` times X <- a X + (b A + c A^2) X with A = X X^T.
static VecD ns_ref(const VecF& G, int64_t rows, int64_t cols, const NsSchedule& sched) {
  const bool tr = rows > cols;
  const int64_t a = tr ? cols : rows, bl = tr ? rows : cols;
  double ss = 0;
  for (float v : G) ss += double(v) * v;
  const double inv = 1.0 / (std::sqrt(ss) * sched.norm_margin);
  VecD X(a * bl), A(a * a), Bm(a * a), Y(a * bl);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < bl; ++j) X[i * bl + j] = (tr ? G[j * cols + i] : G[i * cols + j]) * inv;
  for (const NsStep& k : sched.steps) {
    const double ca = k.a, cb = k.b, cc = k.c;
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < bl; ++k) acc += X[i * bl + k] * X[j * bl + k];
        A[i * a + j] = A[j * a + i] = acc;
      }
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < a; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < a; ++k) acc += A[i * a + k] * A[k * a + j];
        Bm[i * a + j] = cb * A[i * a + j] + cc * acc;
      }
    for (int64_t i = 0; i < a; ++i) {
      double* yr = &Y[i * bl];
      for (int64_t j = 0; j < bl; ++j) yr[j] = ca * X[i * bl + j];
      for (int64_t k = 0; k < a; ++k) {
        const double bk = Bm[i * a + k];
        const double* xr = &X[k * bl];
        for (int64_t j = 0; j < bl; ++j) yr[j] += bk * xr[j];
      }
    }
    std::swap(X, Y);
  }
  VecD out(G.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < bl; ++j) (tr ? out[j * cols + i] : out[i * cols + j]) = X[i * bl + j];
  return out;
}

// The largest element error relative to the largest element of the reference (max_tol), and the
// Frobenius norm of the error relative to that of the reference (frob_tol).
static void ns_case(Backend& be, int64_t rows, int64_t cols, const NsSchedule& sched, MatPrec prec,
                    double max_tol, double frob_tol, bool in_place) {
  SCOPED_TRACE(testing::Message() << rows << "x" << cols << " steps " << sched.steps.size() << " "
                                  << prec_name(prec) << (in_place ? " in place" : ""));
  VecF G = randn(rows * cols, 171 + rows + cols);
  Dev<float> gd(be, G);
  Dev<float> od = nan_out(be, G.size());
  float* out = in_place ? gd.p() : od.p();
  be.newton_schulz(gd.p(), out, rows, cols, sched, prec);
  VecF got = in_place ? gd.get() : od.get();
  VecD ref = ns_ref(G, rows, cols, sched);
  double mref = 0, e2 = 0, r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mref = std::max(mref, std::abs(ref[i]));
    e2 += (got[i] - ref[i]) * (got[i] - ref[i]);
    r2 += ref[i] * ref[i];
  }
  expect_close(got, ref, max_tol * mref, 0, "out");
  EXPECT_LE(std::sqrt(e2 / r2), frob_tol);  // (NaN fails)
}

// Shapes: wide and tall (the short side is the one iterated on), square, and both sides of the
// size where the CPU switches from its plain loops to oneDNN (min^2 * max > 128*128*256). One step
// more or less moves the result by ~0.35 (relative, Frobenius), so both tolerances below separate
// a correct iteration from a wrong step count or coefficient by a wide margin.
TEST_P(BackendOps, NewtonSchulzFp32) {
  // fp32 matmuls: ~1e-7 rounding per step, amplified by the iteration (the quintic's slope at 0 is
  // 3.4), ends near 3e-6 of the largest element and 2e-6 in Frobenius norm: bounds 2e-5 and 1e-5.
  const NsSchedule q5 = NsSchedule::quintic(5);
  for (auto [r, c] : {std::pair<int64_t, int64_t>{24, 40}, {40, 24}, {33, 33}, {136, 300}, {300, 136}})
    ns_case(be(), r, c, q5, MatPrec::F32, 2e-5, 1e-5, false);
  ns_case(be(), 136, 300, NsSchedule::quintic(2), MatPrec::F32, 2e-5, 1e-5, true);
  ns_case(be(), 20, 12, q5, MatPrec::F32, 2e-5, 1e-5, true);
}

TEST_P(BackendOps, NewtonSchulzPolarExpressFp32) {
  // Per-step coefficients and the normalisation margin: Polar Express's first step has a slope of
  // 8.2 at 0 (the quintic's 3.4), so rounding is amplified more; bounds 1e-4 and 5e-5 still
  // separate a wrong coefficient or margin (each moves the result by over 1e-2).
  const NsSchedule pe = NsSchedule::polar_express(5);
  for (auto [r, c] : {std::pair<int64_t, int64_t>{24, 40}, {40, 24}, {136, 300}, {300, 136}})
    ns_case(be(), r, c, pe, MatPrec::F32, 1e-4, 5e-5, false);
  ns_case(be(), 300, 136, NsSchedule::polar_express(7), MatPrec::F32, 1e-4, 5e-5, true);
}

TEST_P(BackendOps, NewtonSchulzBf16) {
  // bf16 matmul inputs (8-bit mantissas, 2^-9 relative rounding; fp32 accumulation) at every step,
  // amplified by the iteration: ~3e-2 of the largest element, ~2e-2 in Frobenius norm. Bounds 6e-2
  // and 4e-2 leave room for rounding at other points of the step. (A backend may run small
  // matrices in fp32 anyway, which passes too.)
  const NsSchedule q5 = NsSchedule::quintic(5);
  for (auto [r, c] : {std::pair<int64_t, int64_t>{24, 40}, {40, 24}, {136, 300}, {300, 136}})
    ns_case(be(), r, c, q5, MatPrec::BF16, 6e-2, 4e-2, false);
  ns_case(be(), 300, 136, q5, MatPrec::BF16, 6e-2, 4e-2, true);
}

// newton_schulz_many against newton_schulz on each matrix alone, for a mix the CPU runs both ways:
// below its loop-path size (24x40, 40x24), small oneDNN shapes dealt whole to threads (192x192,
// 192x768, 768x192, 136x300), and the matrices side by side in one buffer as the optimizer lays
// them out, with out aliasing G for half of them. The results match to the matmul library's
// rounding. On the CPUs measured (AMD Zen 4 with AVX512_BF16, Intel Xeon with AMX) oneDNN's
// single-thread kernels sum as its threaded ones do and the bits agree (Optim.NewtonSchulzMany*
// prints the count); the bounds allow another blocking elsewhere: fp32 2e-6 of the largest element
// (fp32 rounding ~1e-7 amplified by five steps), bf16 2e-2 (a one-ulp bf16 flip of a matmul input,
// 2^-9, amplified alike). Grouped by iterated shape (the CUDA backend's stacks, ns_groups) the mix
// is 192x768 with its transpose, 24x40 with its transpose, 192x192 twice, 136x300 three times (one
// tall) and 96x64 alone.
static void ns_many_case(Backend& be, MatPrec prec, const NsSchedule& sched, double tol) {
  SCOPED_TRACE(testing::Message() << prec_name(prec) << " steps " << sched.steps.size());
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{192, 768}, {24, 40},   {768, 192}, {192, 192},
                                                           {40, 24},   {136, 300}, {192, 192}, {300, 136},
                                                           {96, 64},   {136, 300}};
  std::vector<int64_t> rows, cols, off;
  int64_t total = 0;
  for (auto [r, c] : shapes) {
    rows.push_back(r);
    cols.push_back(c);
    off.push_back(total);
    total += r * c;
  }
  const VecF G = randn(total, 909);
  Dev<float> gd(be, G);
  Dev<float> od = nan_out(be, size_t(total));
  std::vector<const float*> in;
  std::vector<float*> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    in.push_back(gd.p() + off[i]);
    out.push_back(i % 2 ? gd.p() + off[i] : od.p() + off[i]);  // odd ones in place
  }
  be.newton_schulz_many({.count = int(shapes.size()), .G = in.data(), .out = out.data(), .rows = rows.data(),
                         .cols = cols.data(), .sched = &sched, .prec = prec});
  const VecF got_o = od.get(), got_g = gd.get();
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(testing::Message() << rows[i] << "x" << cols[i]);
    const VecF one_in(G.begin() + off[i], G.begin() + off[i] + rows[i] * cols[i]);
    Dev<float> d1(be, one_in);
    Dev<float> o1 = nan_out(be, one_in.size());
    be.newton_schulz(d1.p(), o1.p(), rows[i], cols[i], sched, prec);
    const VecF want = o1.get();
    const VecF& src = i % 2 ? got_g : got_o;
    const VecF got(src.begin() + off[i], src.begin() + off[i] + rows[i] * cols[i]);
    double m = 0;
    for (float v : want) m = std::max(m, double(std::abs(v)));
    expect_close(got, VecD(want.begin(), want.end()), tol * m, 0, "out");
  }
}

// The ways a backend runs newton_schulz_many: on CUDA both of CLOCKLM_CUDA_NS (stacks of same-shape
// matrices with strided-batched matmuls, and one matrix at a time), elsewhere its one way.
static std::vector<std::string> ns_many_modes(const Backend& be) {
  if (be.name().rfind("cuda", 0) == 0) return {"batched", "loop"};
  return {""};
}

// Sets CLOCKLM_CUDA_NS for a scope (empty: unset); unset again at its end.
struct NsModeEnv {
  explicit NsModeEnv(const std::string& mode) {
    if (!mode.empty()) ::setenv("CLOCKLM_CUDA_NS", mode.c_str(), 1);
  }
  ~NsModeEnv() { ::unsetenv("CLOCKLM_CUDA_NS"); }
};

TEST_P(BackendOps, NewtonSchulzManyMatchesOneAtATime) {
  for (const std::string& mode : ns_many_modes(be())) {
    SCOPED_TRACE(mode);
    NsModeEnv env(mode);
    // CUDA's stacks multiply with strided-batched matmuls, which cuBLAS may run with other kernels
    // than the single matrix's, summing in another order: fp32 rounding (~1e-7 per product)
    // amplified by five steps reaches a few 1e-6 (NewtonSchulzFp32 sees 3e-6 against float64), so
    // 1e-5; in bf16 such a change flips matmul inputs by one bf16 ulp in many places, not one, so
    // twice the bound above. A wrong member, transposition or norm moves results by O(1).
    const bool stacked = mode == "batched";
    ns_many_case(be(), MatPrec::F32, NsSchedule::quintic(5), stacked ? 1e-5 : 2e-6);
    ns_many_case(be(), MatPrec::BF16, NsSchedule::polar_express(5), stacked ? 4e-2 : 2e-2);
  }
  // One matrix and none.
  const VecF G = randn(136 * 300, 5);
  Dev<float> gd(be(), G);
  Dev<float> o = nan_out(be(), G.size()), o1 = nan_out(be(), G.size());
  const float* in = gd.p();
  float* out = o.p();
  const int64_t r = 136, c = 300;
  const NsSchedule q5 = NsSchedule::quintic(5);
  be().newton_schulz_many({.count = 1, .G = &in, .out = &out, .rows = &r, .cols = &c, .sched = &q5,
                           .prec = MatPrec::BF16});
  be().newton_schulz(gd.p(), o1.p(), r, c, q5, MatPrec::BF16);
  EXPECT_EQ(o.get(), o1.get());  // the same path for a lone matrix
  be().newton_schulz_many({.count = 0, .sched = &q5, .prec = MatPrec::BF16});
}

TEST_P(BackendOps, NewtonSchulzZeroMatrix) {
  // A parameter that got no gradient has a zero momentum matrix: its update is zero, not NaN (the
  // Frobenius normalisation must not divide by zero).
  for (MatPrec p : {MatPrec::F32, MatPrec::BF16})
    for (auto [r, c] : {std::pair<int64_t, int64_t>{24, 40}, {300, 136}}) {
      SCOPED_TRACE(testing::Message() << r << "x" << c << " " << prec_name(p));
      Dev<float> g(be(), VecF(r * c, 0.0f));
      Dev<float> o = nan_out(be(), r * c);
      be().newton_schulz(g.p(), o.p(), r, c, NsSchedule::quintic(5), p);
      for (float v : o.get()) ASSERT_EQ(v, 0.0f);
    }
  // Two zero matrices of one shape: one stack on CUDA, each normalised by its own (zero) norm.
  for (const std::string& mode : ns_many_modes(be())) {
    SCOPED_TRACE(mode);
    NsModeEnv env(mode);
    const int64_t r = 300, c = 136, rows[2] = {r, r}, cols[2] = {c, c};
    Dev<float> g(be(), VecF(2 * r * c, 0.0f));
    Dev<float> o = nan_out(be(), 2 * r * c);
    const float* in[2] = {g.p(), g.p() + r * c};
    float* out[2] = {o.p(), o.p() + r * c};
    const NsSchedule q5 = NsSchedule::quintic(5);
    be().newton_schulz_many({.count = 2, .G = in, .out = out, .rows = rows, .cols = cols, .sched = &q5,
                             .prec = MatPrec::BF16});
    for (float v : o.get()) ASSERT_EQ(v, 0.0f);
  }
}
