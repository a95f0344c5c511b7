// oneDNN-backed gemm with a per-shape primitive cache, the CPU backend's oneDNN engine and stream
// (dnnl_context.h), and the scalar bf16 conversion (the array conversions are kernels, in
// convert.cpp).
// Why a cache: creating a oneDNN matmul primitive costs ~0.1-1 ms (JIT code generation); a training
// step calls a few dozen distinct shapes thousands of times, so each shape is created once.
#include "backend/cpu/matmul.h"

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <dnnl.hpp>
#include <omp.h>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/dnnl_context.h"
#include "core/common.h"

namespace clm {

namespace {

struct GemmKey {
  int prec, ta, tb, acc, threads;
  int64_t M, N, K, lda, ldb, ldc;
  auto tie() const { return std::tie(prec, ta, tb, acc, threads, M, N, K, lda, ldb, ldc); }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

struct GemmEntry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

struct GemmCache {
  std::map<GemmKey, GemmEntry> map;
  std::vector<float> wide_a, wide_b;  // bf16 inputs widened to fp32 (no bf16 matmul on this CPU)
  std::mutex mu;
};

GemmCache& gemm_cache() {
  static GemmCache c;
  return c;
}

}  // namespace

// Created on first use and never destroyed: primitives cached in other static objects refer to the
// engine, and static destructors run in no order this file controls.
dnnl::engine& cpu_engine() {
  static dnnl::engine* eng = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *eng;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream* strm = new dnnl::stream(cpu_engine());
  return *strm;
}

bool cpu_has_bf16_matmul() {
  static const bool ok = [] {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    try {
      dnnl::memory::desc ab({16, 16}, dt::bf16, tag::ab), c({16, 16}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ab, ab, c), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

namespace {
// A stored row-major [rows, cols] with row stride ld, as the oneDNN descriptor of the logical
// [r, c] operand: as is, or (transposed) read with swapped strides.
dnnl::memory::desc strided_desc(int64_t r, int64_t c, bool transposed, int64_t ld, dnnl::memory::data_type t) {
  using dims = dnnl::memory::dims;
  return dnnl::memory::desc(dims{r, c}, t, transposed ? dims{1, ld} : dims{ld, 1});
}

// Widens n rows of `cols` bf16 at stride ld into packed fp32 (the stride dropped).
void widen_rows(const bf16* x, float* y, int64_t n, int64_t cols, int64_t ld) {
  if (ld == cols) {
    bf16_to_f32(x, y, n * cols);
    return;
  }
  for (int64_t r = 0; r < n; ++r) bf16_to_f32(x + r * ld, y + r * cols, cols);
}

}  // namespace

void gemm(const GemmArgs& g) {
  const int64_t M = g.M, N = g.N, K = g.K;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!g.accumulate)
      for (int64_t m = 0; m < M; ++m) std::memset(g.C + m * g.c_ld(), 0, sizeof(float) * N);
    return;
  }
  using dt = dnnl::memory::data_type;
  auto& c = gemm_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  dnnl::engine& eng = cpu_engine();
  // Where oneDNN has no bf16 matmul for this CPU, bf16 inputs are widened to fp32 (exactly, and
  // packed) and multiplied in fp32: the same products, fp32 accumulation as before, only slower.
  const bool widen = g.prec == MatPrec::BF16 && !cpu_has_bf16_matmul();
  const int64_t lda = widen ? (g.trans_a ? M : K) : g.a_ld(), ldb = widen ? (g.trans_b ? K : N) : g.b_ld();
  GemmKey key{int(g.prec), g.trans_a, g.trans_b, g.accumulate, omp_get_max_threads(), M, N, K, lda, ldb, g.c_ld()};
  auto it = c.map.find(key);
  if (it == c.map.end()) {
    const dt in_t = g.prec == MatPrec::BF16 && !widen ? dt::bf16 : dt::f32;
    const dnnl::memory::desc a_md = strided_desc(M, K, g.trans_a, lda, in_t);
    const dnnl::memory::desc b_md = strided_desc(K, N, g.trans_b, ldb, in_t);
    const dnnl::memory::desc c_md = strided_desc(M, N, false, g.c_ld(), dt::f32);
    dnnl::primitive_attr attr;
    if (g.accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::desc d(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(d, attr, eng);
    it = c.map.emplace(key, GemmEntry{dnnl::matmul(pd), a_md, b_md, c_md}).first;
  }
  GemmEntry& e = it->second;
  const void* A = g.A;
  const void* B = g.B;
  if (widen) {
    c.wide_a.resize(size_t(M * K));
    c.wide_b.resize(size_t(K * N));
    widen_rows(static_cast<const bf16*>(A), c.wide_a.data(), g.trans_a ? K : M, g.trans_a ? M : K, g.a_ld());
    widen_rows(static_cast<const bf16*>(B), c.wide_b.data(), g.trans_b ? N : K, g.trans_b ? K : N, g.b_ld());
    A = c.wide_a.data();
    B = c.wide_b.data();
  }
  dnnl::memory am(e.a, eng, const_cast<void*>(A));
  dnnl::memory bm(e.b, eng, const_cast<void*>(B));
  dnnl::memory cm(e.c, eng, g.C);
  e.prim.execute(cpu_stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  cpu_stream().wait();
}

Bf16Timing time_bf16_vs_fp32(int64_t M, int64_t N, int64_t K, int reps) {
  std::vector<float> a32(size_t(M * K)), b32(size_t(N * K)), c(size_t(M * N));
  Rng rng(11);
  for (auto& v : a32) v = rng.normal();
  for (auto& v : b32) v = rng.normal();
  std::vector<bf16> a16(a32.size()), b16(b32.size());
  f32_to_bf16(a32.data(), a16.data(), int64_t(a32.size()));
  f32_to_bf16(b32.data(), b16.data(), int64_t(b32.size()));
  auto run = [&](MatPrec p) {
    const double t0 = now_seconds();
    const void* a = p == MatPrec::BF16 ? static_cast<const void*>(a16.data()) : a32.data();
    const void* b = p == MatPrec::BF16 ? static_cast<const void*>(b16.data()) : b32.data();
    gemm({.prec = p, .trans_b = true, .M = M, .N = N, .K = K, .A = a, .B = b, .C = c.data()});
    return now_seconds() - t0;
  };
  run(MatPrec::BF16);  // primitive creation (JIT) and first touch, untimed
  run(MatPrec::F32);
  Bf16Timing t{1e30, 1e30};
  for (int r = 0; r < reps; ++r) {  // alternating, so a burst of load hits both alike
    t.bf16_seconds = std::min(t.bf16_seconds, run(MatPrec::BF16));
    t.fp32_seconds = std::min(t.fp32_seconds, run(MatPrec::F32));
  }
  return t;
}

double measure_matmul_ceiling_gflops(int64_t n, int reps) {
  std::vector<bf16> a(n * n), b(n * n);
  std::vector<float> cbuf(n * n);
  Rng rng(7);
  for (auto& v : a) v = f32_to_bf16(rng.normal());
  for (auto& v : b) v = f32_to_bf16(rng.normal());
  const GemmArgs g{.prec = MatPrec::BF16, .trans_b = true, .M = n, .N = n, .K = n, .A = a.data(), .B = b.data(),
                   .C = cbuf.data()};
  gemm(g);  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_seconds();
    gemm(g);
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * double(n) * n * n / best / 1e9;
}

}  // namespace clm
