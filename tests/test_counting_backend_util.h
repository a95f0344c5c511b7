// A backend that forwards everything to the CPU backend and counts the calls that make a device
// wait for the host (reads back, synchronize), in all and per step: a step starts where it asks
// for its one DeviceTimer (train_step), so reads_per_step[i] is what happened from step i's start
// to step i + 1's (the loop's bookkeeping after step i included).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace test_util {

using namespace clm;

class CountingBackend final : public Backend {
 public:
  int reads = 0, syncs = 0;
  std::vector<int> reads_per_step, syncs_per_step;
  std::string name() const override { return be_.name(); }
  std::string description() const override { return be_.description(); }
  bool host_visible() const override { return be_.host_visible(); }
  bool native_bf16() const override { return be_.native_bf16(); }
  size_t memory_capacity() const override { return be_.memory_capacity(); }
  void* alloc(size_t bytes) override { return be_.alloc(bytes); }
  void free(void* p) override { be_.free(p); }
  void to_device(void* dst, const void* src, size_t bytes) override { be_.to_device(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override {
    ++reads;
    be_.to_host(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override { be_.copy(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override { be_.zero(dst, bytes); }
  void synchronize() override {
    ++syncs;
    be_.synchronize();
  }
  std::unique_ptr<DeviceTimer> timer() override {
    if (timers_++ > 0) {
      reads_per_step.push_back(reads - reads_at_);
      syncs_per_step.push_back(syncs - syncs_at_);
    }
    reads_at_ = reads;
    syncs_at_ = syncs;
    return be_.timer();
  }
  void set_threads(int n) override { be_.set_threads(n); }
  double peak_flops(MatPrec prec) override { return be_.peak_flops(prec); }
  void prepare_gemm(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K) override {
    be_.prepare_gemm(prec, ta, tb, M, N, K);
  }
#define CLM_COUNTING_OP(name, R, params, args, cpu, cuda) \
  R name params override { return be_.name args; }
  CLM_BACKEND_OPS(CLM_COUNTING_OP)
#undef CLM_COUNTING_OP

 private:
  Backend& be_ = cpu_backend();
  int timers_ = 0, reads_at_ = 0, syncs_at_ = 0;
};

}  // namespace test_util
