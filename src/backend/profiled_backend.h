// A profiling decorator over any backend: every compute op is forwarded to the wrapped backend
// inside a ProfScope (core/profiler.h) that carries the op's FLOPs and bytes, computed from its
// shape arguments, under the name and phase of the profiler's innermost open ProfRegion (the op's
// own name and phase "other" when none is open). Memory, identity and timing calls forward
// without events. Callers (the model, the optimizer) keep their device pointers; only their op
// dispatch goes through this object while a profiler is attached.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/profiler.h"

namespace clm {

// The cost formulas of the ops (profiled_backend.cpp), for the decorator and its tests.
namespace op_cost {
// FLOPs and bytes (read + written) of one op, from its shapes.
struct Cost {
  double flops = 0, bytes = 0;
};
// Element-wise: `f` FLOPs and `b` bytes per element of n.
inline Cost per_elem(double n, double f, double b) { return {f * n, b * n}; }
Cost gemm(MatPrec prec, int64_t M, int64_t N, int64_t K, bool accumulate);
Cost rmsnorm_fwd(int64_t rows, int64_t C, DType out_t);
Cost rmsnorm_bwd(int64_t rows, int64_t C);
Cost qkv_heads_fwd(const HeadShape& s, int T);
Cost qkv_heads_bwd(const HeadShape& s, int T);
// Keys attended by Tq queries at positions Tk - Tq .. Tk - 1 (window > 0: at most `window` each).
double attended_pairs(int Tq, int Tk, int window);
Cost attention_fwd(const HeadShape& s, int Tq, int Tk, int window);
Cost attention_bwd(const HeadShape& s, int T, int window);
Cost activation_fwd(Activation a, int64_t N, int64_t Hd, DType out_t);
Cost activation_bwd(Activation a, int64_t N, int64_t Hd);
Cost newton_schulz(int64_t rows, int64_t cols, int steps, MatPrec prec);
}  // namespace op_cost

class ProfiledBackend final : public Backend {
 public:
  // Both must outlive this object. On an asynchronous device the profiler is told to wait for it
  // around every scope (Profiler::wait), so each op is charged its device time.
  ProfiledBackend(Backend& inner, Profiler& prof);
  Backend& inner() const { return be_; }
  // Records into `prof` from now on (a caller keeps one decorator while profilers come and go, so
  // buffers allocated through it stay valid).
  void attach(Profiler& prof);

  // ---- forwarded without events ----
  std::string name() const override { return be_.name(); }
  std::string description() const override { return be_.description(); }
  bool host_visible() const override { return be_.host_visible(); }
  bool native_bf16() const override { return be_.native_bf16(); }
  size_t memory_capacity() const override { return be_.memory_capacity(); }
  void* alloc(size_t bytes) override { return be_.alloc(bytes); }
  void free(void* p) override { be_.free(p); }
  void to_device(void* dst, const void* src, size_t bytes) override { be_.to_device(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { be_.to_host(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { be_.copy(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override { be_.zero(dst, bytes); }
  void synchronize() override { be_.synchronize(); }
  std::unique_ptr<DeviceTimer> timer() override { return be_.timer(); }
  void set_threads(int n) override { be_.set_threads(n); }
  double peak_flops(MatPrec prec) override { return be_.peak_flops(prec); }
  void prepare_gemm(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K) override {
    be_.prepare_gemm(prec, ta, tb, M, N, K);
  }

  // ---- timed: each op once, with its cost ----
  void gemm(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A,
            const void* B, float* C, bool accumulate) override {
    Scope scope(*prof_, "gemm", op_cost::gemm(prec, M, N, K, accumulate));
    be_.gemm(prec, ta, tb, M, N, K, A, B, C, accumulate);
  }
  void f32_to_bf16(const float* x, bf16* y, int64_t n) override {
    Scope scope(*prof_, "f32_to_bf16", op_cost::per_elem(double(n), 0, 6));
    be_.f32_to_bf16(x, y, n);
  }
  void bf16_to_f32(const bf16* x, float* y, int64_t n) override {
    Scope scope(*prof_, "bf16_to_f32", op_cost::per_elem(double(n), 0, 6));
    be_.bf16_to_f32(x, y, n);
  }
  void embedding_fwd(const int32_t* tok, const float* wte, float* out, int64_t N, int64_t C) override {
    Scope scope(*prof_, "embedding_fwd", op_cost::per_elem(double(N) * double(C), 0, 8));
    be_.embedding_fwd(tok, wte, out, N, C);
  }
  void embedding_bwd(const int32_t* tok, const float* dout, float* dwte, int64_t N, int64_t C) override {
    Scope scope(*prof_, "embedding_bwd", op_cost::per_elem(double(N) * double(C), 1, 12));
    be_.embedding_bwd(tok, dout, dwte, N, C);
  }
  void rmsnorm_fwd(const float* x, const float* g, void* y, DType out_t, float* rstd, int64_t rows,
                   int64_t C, float eps) override {
    Scope scope(*prof_, "rmsnorm_fwd", op_cost::rmsnorm_fwd(rows, C, out_t));
    be_.rmsnorm_fwd(x, g, y, out_t, rstd, rows, C, eps);
  }
  void rmsnorm_bwd(const float* x, const float* g, const float* rstd, const float* dy, float* dx,
                   float* dg, int64_t rows, int64_t C) override {
    Scope scope(*prof_, "rmsnorm_bwd", op_cost::rmsnorm_bwd(rows, C));
    be_.rmsnorm_bwd(x, g, rstd, dy, dx, dg, rows, C);
  }
  void rope_tables(float* cos_t, float* sin_t, int T, int hd, float base) override {
    Scope scope(*prof_, "rope_tables", op_cost::per_elem(double(T) * hd, 0, 4));
    be_.rope_tables(cos_t, sin_t, T, hd, base);
  }
  void rope_fwd(float* x, int64_t rows, int T, int hd, const float* cos_t, const float* sin_t,
                int pos0) override {
    Scope scope(*prof_, "rope_fwd", op_cost::per_elem(double(rows) * hd, 3, 12));
    be_.rope_fwd(x, rows, T, hd, cos_t, sin_t, pos0);
  }
  void qkv_heads_fwd(const QkvHeadsFwdArgs& a) override {
    Scope scope(*prof_, "qkv_heads_fwd", op_cost::qkv_heads_fwd(a.shape, a.T));
    be_.qkv_heads_fwd(a);
  }
  void qkv_heads_bwd(const QkvHeadsBwdArgs& a) override {
    Scope scope(*prof_, "qkv_heads_bwd", op_cost::qkv_heads_bwd(a.shape, a.T));
    be_.qkv_heads_bwd(a);
  }
  void attention_fwd(const AttentionFwdArgs& a) override {
    Scope scope(*prof_, "attention_fwd", op_cost::attention_fwd(a.shape, a.Tq, a.Tk, a.window));
    be_.attention_fwd(a);
  }
  void attention_bwd(const AttentionBwdArgs& a) override {
    Scope scope(*prof_, "attention_bwd", op_cost::attention_bwd(a.shape, a.T, a.window));
    be_.attention_bwd(a);
  }
  void split_heads(const float* x, int64_t ld, float* y, int B, int T, int nh, int hd) override {
    Scope scope(*prof_, "split_heads", op_cost::per_elem(double(B) * T * nh * hd, 0, 8));
    be_.split_heads(x, ld, y, B, T, nh, hd);
  }
  void merge_heads(const float* y, void* x, DType out_t, int64_t ld, int B, int T, int nh,
                   int hd) override {
    Scope scope(*prof_, "merge_heads", op_cost::per_elem(double(B) * T * nh * hd, 0, 4.0 + double(dtype_size(out_t))));
    be_.merge_heads(y, x, out_t, ld, B, T, nh, hd);
  }
  void activation_fwd(Activation a, const float* h, void* y, DType out_t, int64_t N,
                      int64_t Hd) override {
    Scope scope(*prof_, "activation_fwd", op_cost::activation_fwd(a, N, Hd, out_t));
    be_.activation_fwd(a, h, y, out_t, N, Hd);
  }
  void activation_bwd(Activation a, const float* h, const float* dy, void* dh, DType out_t,
                      int64_t N, int64_t Hd) override {
    Scope scope(*prof_, "activation_bwd", op_cost::activation_bwd(a, N, Hd));
    be_.activation_bwd(a, h, dy, dh, out_t, N, Hd);
  }
  void residual_fwd(const float* a, const float* b, float* out, int64_t n) override {
    Scope scope(*prof_, "residual_fwd", op_cost::per_elem(double(n), 1, 12));
    be_.residual_fwd(a, b, out, n);
  }
  void mix2_fwd(const float* x, const float* x0, const float* w, float* out, int64_t n) override {
    Scope scope(*prof_, "mix2_fwd", op_cost::per_elem(double(n), 3, 12));
    be_.mix2_fwd(x, x0, w, out, n);
  }
  void mix2_bwd(const float* dout, const float* x, const float* x0, const float* w, float* dx,
                float* dx0, float* dw, int64_t n) override {
    Scope scope(*prof_, "mix2_bwd", op_cost::per_elem(double(n), 6, 24));
    be_.mix2_bwd(dout, x, x0, w, dx, dx0, dw, n);
  }
  void scale(float* x, float s, int64_t n) override {
    Scope scope(*prof_, "scale", op_cost::per_elem(double(n), 1, 8));
    be_.scale(x, s, n);
  }
  void axpy(float* y, float a, const float* x, int64_t n) override {
    Scope scope(*prof_, "axpy", op_cost::per_elem(double(n), 2, 12));
    be_.axpy(y, a, x, n);
  }
  double softcap_xent(const SoftcapXentArgs& a) override {
    Scope scope(*prof_, "softcap_xent", {30.0 * double(a.N) * a.V, 8.0 * double(a.N) * a.Vp});
    return be_.softcap_xent(a);
  }
  void softcap_fwd(float* z, int64_t n, float cap) override {
    Scope scope(*prof_, "softcap_fwd", op_cost::per_elem(double(n), 5, 8));
    be_.softcap_fwd(z, n, cap);
  }
  double sum_squares(const float* x, int64_t n) override {
    Scope scope(*prof_, "sum_squares", op_cost::per_elem(double(n), 2, 4));
    return be_.sum_squares(x, n);
  }
  void sum_squares_many(const float* const* xs, const int64_t* ns, int count, double* out) override {
    double n = 0;
    for (int i = 0; i < count; ++i) n += double(ns[i]);
    Scope scope(*prof_, "sum_squares_many", op_cost::per_elem(n, 2, 4));
    be_.sum_squares_many(xs, ns, count, out);
  }
  void adamw_update(const AdamWArgs& a) override {
    Scope scope(*prof_, "adamw_update", op_cost::per_elem(double(a.n), 12, 28));
    be_.adamw_update(a);
  }
  void muon_momentum(const float* grad, float* buf, float* u, int64_t n, float gscale, float mu,
                     bool nesterov) override {
    Scope scope(*prof_, "muon_momentum", op_cost::per_elem(double(n), 4, 16));
    be_.muon_momentum(grad, buf, u, n, gscale, mu, nesterov);
  }
  void muon_apply(float* p, const float* o, int64_t n, float lr, float scale, float wd,
                  bool cautious) override {
    Scope scope(*prof_, "muon_apply", op_cost::per_elem(double(n), 3, 12));
    be_.muon_apply(p, o, n, lr, scale, wd, cautious);
  }
  void normuon_scale(float* o, float* v, int64_t rows, int64_t cols, float beta2,
                     float eps) override {
    Scope scope(*prof_, "normuon_scale", op_cost::per_elem(double(rows) * double(cols), 5, 12));
    be_.normuon_scale(o, v, rows, cols, beta2, eps);
  }
  void newton_schulz(const float* G, float* out, int64_t rows, int64_t cols,
                     const NsSchedule& sched, MatPrec prec) override {
    Scope scope(*prof_, "newton_schulz", op_cost::newton_schulz(rows, cols, int(sched.steps.size()), prec));
    be_.newton_schulz(G, out, rows, cols, sched, prec);
  }

 private:
  // A scope for op `op` named by the innermost open region (or `op`, phase "other").
  struct Scope : ProfScope {
    Scope(Profiler& p, const char* op, op_cost::Cost c);
  };

  Backend& be_;
  Profiler* prof_;
};

}  // namespace clm
