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
// Keys attended by Tq queries at positions Tk - Tq .. Tk - 1 (window > 0: at most `window` each).
double attended_pairs(int Tq, int Tk, int window);
Cost attention_fwd(const HeadShape& s, int Tq, int Tk, int window);
Cost newton_schulz(int64_t rows, int64_t cols, int steps, MatPrec prec);

// One formula per op of backend/op_list.h, with the op's own parameters. The decorator below calls
// each, so an op without its formula (or with one of another signature) fails the build at link.
#define CLM_OP_COST_DECLARE(name, R, params, args, cpu, cuda) Cost name params;
CLM_BACKEND_OPS(CLM_OP_COST_DECLARE)
#undef CLM_OP_COST_DECLARE
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

  // ---- timed: each op of backend/op_list.h once, with its cost ----
#define CLM_PROFILED_OP(name, R, params, args, cpu, cuda) \
  R name params override {                                \
    Scope scope(*prof_, #name, op_cost::name args);       \
    return be_.name args;                                 \
  }
  CLM_BACKEND_OPS(CLM_PROFILED_OP)
#undef CLM_PROFILED_OP

 private:
  // A scope for op `op` named by the innermost open region (or `op`, phase "other").
  struct Scope : ProfScope {
    Scope(Profiler& p, const char* op, op_cost::Cost c);
  };

  Backend& be_;
  Profiler* prof_;
};

}  // namespace clm
