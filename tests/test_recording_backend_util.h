// A backend over the CPU backend that records, as a GPU does with CUDA graphs: inside record() every
// op is kept with copies of its arguments (and of the host arrays two ops take) instead of running,
// and a replay runs the kept ops again. What a replay computes is then exactly what a CUDA graph of
// the same ops would: pointers and values as recorded. So a training step that trains the same
// with replays as without on this backend keeps nothing in host values that changes between steps.
// The calls a GPU refuses inside a recording (to_device, to_host, alloc, free, synchronize, timer)
// throw here too.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/common.h"

namespace test_util {

using namespace clm;

// An op's arguments as recorded: a tuple of copies. The two ops whose arguments point to host
// arrays keep copies of the arrays too (a CUDA graph reads them once, at recording).
template <class Tup>
struct Held {
  Tup t;
  explicit Held(Tup x) : t(std::move(x)) {}
};
using SumSquaresTuple = std::tuple<const float* const*, const int64_t*, int, double*>;
template <>
struct Held<SumSquaresTuple> {
  std::vector<const float*> xs;
  std::vector<int64_t> ns;
  SumSquaresTuple t;
  explicit Held(SumSquaresTuple x)
      : xs(std::get<0>(x), std::get<0>(x) + std::get<2>(x)),
        ns(std::get<1>(x), std::get<1>(x) + std::get<2>(x)),
        t(xs.data(), ns.data(), std::get<2>(x), std::get<3>(x)) {}
};
template <>
struct Held<std::tuple<NewtonSchulzManyArgs>> {
  std::vector<const float*> G;
  std::vector<float*> out;
  std::vector<int64_t> rows, cols;
  NsSchedule sched;
  std::tuple<NewtonSchulzManyArgs> t;
  explicit Held(std::tuple<NewtonSchulzManyArgs> x) {
    const NewtonSchulzManyArgs& a = std::get<0>(x);
    G.assign(a.G, a.G + a.count);
    out.assign(a.out, a.out + a.count);
    rows.assign(a.rows, a.rows + a.count);
    cols.assign(a.cols, a.cols + a.count);
    sched = *a.sched;
    NewtonSchulzManyArgs b = a;
    b.G = G.data();
    b.out = out.data();
    b.rows = rows.data();
    b.cols = cols.data();
    b.sched = &sched;
    t = std::tuple<NewtonSchulzManyArgs>(b);
  }
};

class RecordingBackend final : public Backend {
 public:
  int recordings = 0, replays = 0, stale_replays = 0;
  // Makes every earlier recording stale, as a GPU backend's moved scratch does.
  void move_memory() { ++epoch_; }

  std::string name() const override { return be_.name(); }
  std::string description() const override { return be_.description(); }
  bool host_visible() const override { return be_.host_visible(); }
  bool native_bf16() const override { return be_.native_bf16(); }
  size_t memory_capacity() const override { return be_.memory_capacity(); }
  void* alloc(size_t bytes) override { return refused("alloc") ? nullptr : be_.alloc(bytes); }
  void free(void* p) override {
    refused("free");
    be_.free(p);
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    refused("to_device");
    be_.to_device(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    refused("to_host");
    be_.to_host(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    keep_or_run([=, this] { be_.copy(dst, src, bytes); });
  }
  void zero(void* dst, size_t bytes) override {
    keep_or_run([=, this] { be_.zero(dst, bytes); });
  }
  void synchronize() override {
    refused("synchronize");
    be_.synchronize();
  }
  std::unique_ptr<DeviceTimer> timer() override {
    refused("timer");
    return be_.timer();
  }
  void set_threads(int n) override { be_.set_threads(n); }
  double peak_flops(MatPrec prec) override { return be_.peak_flops(prec); }
  void prepare_gemm(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K) override {
    be_.prepare_gemm(prec, ta, tb, M, N, K);
  }

  bool can_record() const override { return true; }
  std::unique_ptr<Recording> record(const std::function<void()>& issue) override {
    if (tape_) fail("record inside a recording");
    auto tape = std::make_shared<std::vector<std::function<void()>>>();
    tape_ = tape.get();
    try {
      issue();
    } catch (...) {
      tape_ = nullptr;
      throw;
    }
    tape_ = nullptr;
    ++recordings;
    return std::make_unique<Tape>(*this, std::move(tape), epoch_);
  }

#define CLM_RECORDING_OP(name, R, params, args, cpu, cuda)                                          \
  R name params override {                                                                          \
    if (!tape_) return be_.name args;                                                               \
    auto held = std::make_shared<Held<decltype(std::make_tuple args)>>(std::make_tuple args);       \
    tape_->push_back([this, held] { std::apply([this](auto... x) { be_.name(x...); }, held->t); }); \
  }
  CLM_BACKEND_OPS(CLM_RECORDING_OP)
#undef CLM_RECORDING_OP

 private:
  struct Tape final : Recording {
    RecordingBackend& be;
    std::shared_ptr<std::vector<std::function<void()>>> ops;
    int epoch;
    Tape(RecordingBackend& b, std::shared_ptr<std::vector<std::function<void()>>> o, int e)
        : be(b), ops(std::move(o)), epoch(e) {}
    bool replay() override {
      if (epoch != be.epoch_) {
        ++be.stale_replays;
        return false;
      }
      ++be.replays;
      for (auto& op : *ops) op();
      return true;
    }
  };
  bool refused(const char* call) const {
    if (tape_) fail("{} inside a recording", call);
    return false;
  }
  void keep_or_run(std::function<void()> op) {
    if (tape_) tape_->push_back(std::move(op));
    else op();
  }

  Backend& be_ = cpu_backend();
  std::vector<std::function<void()>>* tape_ = nullptr;
  int epoch_ = 0;
};

}  // namespace test_util
