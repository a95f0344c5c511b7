// The device interface. The model, the optimizer and the training step are written once against
// this class; a backend (backend/cpu, backend/cuda) implements it for one kind of device.
//
// Contract, for whoever adds a backend (docs/ARCHITECTURE.md, "How to add a backend"):
// - Pointers passed to the ops are device pointers from alloc() (or offsets into them). Host memory
//   reaches the device only through to_device/to_host. Ops may run asynchronously; to_host and
//   synchronize() wait for everything issued before them.
// - The ops are declared once, in backend/op_list.h, from which this class's pure virtuals are
//   generated. Every op mirrors one forward/backward function of backend/cpu/ops.h with the same
//   shapes and the same accumulate (+=) or overwrite (=) rule; the CPU backend is the reference
//   the others are tested against (tests/test_backend_ops.cpp).
// - Results are deterministic for a given device, binary and thread count: reductions run in a
//   fixed order.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/dtype.h"
#include "backend/op_args.h"
#include "backend/op_list.h"

namespace clm {

enum class Activation { ReLU2, GELU, SwiGLU };

// Muon's orthogonalisation as a schedule of Newton-Schulz steps. Each step is
// X <- a X + (b A + c A^2) X with A = X X^T, after X0 = G / (||G||_F * norm_margin + 1e-7).
struct NsStep {
  float a, b, c;
};
struct NsSchedule {
  std::vector<NsStep> steps;
  float norm_margin = 1.0f;
  // Muon's original quintic: the same (3.4445, -4.7750, 2.0315) at every step.
  static NsSchedule quintic(int steps);
  // Polar Express (Amsel et al., 2025): coefficients chosen per step for the fastest worst-case
  // convergence of singular values in (0, 1] towards 1, with the 2% margin on the normalisation
  // that modded-nanogpt uses; steps past the fifth repeat the fifth.
  static NsSchedule polar_express(int steps);
};
// optim.*.ns_coeffs: "quintic" | "polar"; throws Error on anything else.
NsSchedule ns_schedule(const std::string& name, int steps);
Activation activation_from_name(const std::string& name);  // relu2 | gelu | swiglu; throws Error

// Device time of an interval: wall time on the CPU, CUDA events on a GPU. stop() waits for the
// device to finish the work issued since start().
struct DeviceTimer {
  virtual ~DeviceTimer() = default;
  virtual void start() = 0;
  virtual double stop() = 0;  // seconds
};

// Ops recorded once and queued again as a whole (a CUDA graph on a GPU): see Backend::record.
class Recording {
 public:
  virtual ~Recording() = default;
  // Queues the recorded ops again, in order, with the arguments they were recorded with (the same
  // pointers and values). False, with nothing queued, when the backend has since moved memory the
  // ops use (its scratch grew): record again.
  [[nodiscard]] virtual bool replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- identity ----
  virtual std::string name() const = 0;         // "cpu", "cuda:0"
  virtual std::string description() const = 0;  // the device, its kernels and features, one line
  // True when device pointers are host pointers (the CPU): host code may then read them directly.
  virtual bool host_visible() const = 0;
  // Whether bf16 matmuls run faster than fp32 ones on this device (on a CPU whose instruction set
  // leaves it open, measured once per process by prefer_bf16's rule); `auto` precision follows it.
  virtual bool native_bf16() const = 0;

  // ---- memory ----
  // Bytes this device can hold in all (the machine's memory for the CPU, within any cgroup limit);
  // configurations that need more are refused before anything is allocated.
  virtual size_t memory_capacity() const = 0;
  virtual void* alloc(size_t bytes) = 0;  // zero-filled, 64-byte aligned; throws Error when out of memory
  virtual void free(void* p) = 0;
  virtual void to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void synchronize() = 0;
  virtual std::unique_ptr<DeviceTimer> timer() = 0;

  // ---- host threads and peak throughput ----
  // Threads the backend's host-side work uses (the CPU: every OpenMP op; a GPU: none of its ops).
  virtual void set_threads(int n) = 0;
  // The practical peak of this device's matmuls in `prec`, in FLOP/s (measured once per process
  // on a large square gemm; the denominator of MFU).
  virtual double peak_flops(MatPrec prec) = 0;

  // Builds whatever a gemm shape needs before it is first timed (JIT kernels, plans). Optional.
  virtual void prepare_gemm(MatPrec prec, bool trans_a, bool trans_b, int64_t M, int64_t N,
                            int64_t K) {}
  // dst = src in dtype `to` (a copy for F32, a rounding for BF16).
  void convert(const float* src, void* dst, int64_t n, DType to);

  // The linear layer y = x W^T (W stored [out, in]), written with gemm. ld: the row stride of the
  // [N, out] matrix (y forward, dy backward; 0: out).
  void linear_fwd(MatPrec p, const void* x, const void* W, float* y, int64_t N, int64_t in,
                  int64_t out, int64_t ld = 0) {
    gemm({.prec = p, .trans_b = true, .M = N, .N = out, .K = in, .A = x, .B = W, .C = y, .ldc = ld});
  }
  void linear_bwd_input(MatPrec p, const void* dy, const void* W, float* dx, int64_t N,
                        int64_t in, int64_t out, bool accumulate, int64_t ld = 0) {  // dx (=/+=) dy W
    gemm({.prec = p, .M = N, .N = in, .K = out, .A = dy, .B = W, .C = dx, .accumulate = accumulate, .lda = ld});
  }
  void linear_bwd_weight(MatPrec p, const void* dy, const void* x, float* dW, int64_t N,
                         int64_t in, int64_t out, int64_t ld = 0) {  // dW += dy^T x
    gemm({.prec = p, .trans_a = true, .M = out, .N = in, .K = N, .A = dy, .B = x, .C = dW, .accumulate = true,
          .lda = ld});
  }

  // ---- recording ----
  // Whether record() works here (a GPU: CUDA graphs). Recording pays where launches cost more than
  // the work they launch; the CPU runs each op as it is issued and cannot.
  virtual bool can_record() const { return false; }
  // Runs `issue`, which queues ops, recording them instead of running them; replay() then queues
  // them. Every pointer and value an op receives is fixed at recording: whatever changes from one
  // replay to the next must be in device memory, written before the replay (to_device). Inside
  // `issue` the calls that wait for the device or move host memory (to_device, to_host, alloc,
  // free, synchronize, timer) throw an Error, as does a backend whose scratch would have to grow
  // (issue the same ops once without recording first). An exception from `issue` ends the
  // recording and propagates; nothing recorded remains.
  virtual std::unique_ptr<Recording> record(const std::function<void()>& issue);

  // ---- the ops: one pure virtual per entry of backend/op_list.h (shapes, rules, comments there) ----
#define CLM_BACKEND_PURE_VIRTUAL(name, R, params, args, cpu, cuda) virtual R name params = 0;
  CLM_BACKEND_OPS(CLM_BACKEND_PURE_VIRTUAL)
#undef CLM_BACKEND_PURE_VIRTUAL
};

// One allocation on a backend, freed with it (the arenas that parameters and activations are
// carved from).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& be, size_t bytes) : be_(&be), p_(be.alloc(bytes)), bytes_(bytes) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : be_(o.be_), p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void reset();
  template <typename T = float>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  Backend* be_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// ---- selecting a backend ----
// Names a user may pass to --device: "cpu", "cuda" (or "cuda:N"), "auto" (the best present: a
// usable GPU, else the CPU). A backend that is not compiled in, or has no device, is a one-line
// Error saying why.
std::shared_ptr<Backend> make_backend(const std::string& name = "auto");
// Every backend usable on this machine (the CPU always), for tests and `clocklm info`.
std::vector<std::string> available_backends();
// The process-wide CPU backend (host-side work and the reference in tests).
Backend& cpu_backend();

// The rule for choosing bf16 from timings of the same gemm: bf16 must take at most 1/1.25 of fp32's
// time. A smaller edge is not worth bf16's rounding and its conversions of every matmul input, and
// a choice near parity could flip between runs on a noisy machine.
bool prefer_bf16(double bf16_seconds, double fp32_seconds);

// Matmul precision from a config value: "bf16", "fp32", or "auto" (bf16 where the device multiplies
// bf16 natively, else fp32). Throws Error on anything else.
MatPrec resolve_precision(const std::string& setting, const Backend& be);

// Refuses, before anything is allocated, a workload whose estimated `need` bytes exceed what the
// device holds: one-line Error naming `what`, the estimate and the device's memory.
void check_fits_memory(const Backend& be, size_t need, const std::string& what);

}  // namespace clm
