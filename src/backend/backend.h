// The device interface. The model, the optimizer and the training step are written once against
// this class; a backend (backend/cpu, backend/cuda) implements it for one kind of device.
//
// Contract, for whoever adds a backend (docs/ARCHITECTURE.md, "How to add a backend"):
// - Pointers passed to the ops are device pointers from alloc() (or offsets into them). Host memory
//   reaches the device only through to_device/to_host. Ops may run asynchronously; to_host and
//   synchronize() wait for everything issued before them.
// - Every op mirrors one forward/backward function of backend/cpu/ops.h with the same shapes and
//   the same accumulate (+=) or overwrite (=) rule; the CPU backend is the reference the others are
//   tested against (tests/test_backend_ops.cpp).
// - Results are deterministic for a given device, binary and thread count: reductions run in a
//   fixed order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/dtype.h"
#include "backend/op_args.h"

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

  // ---- matmul and conversions ----
  // C[M,N] (=, or += when accumulate) A[M,K] B[K,N]; A stored [M,K] or, trans_a, [K,M]; B stored
  // [K,N] or, trans_b, [N,K]. A and B hold bf16 (BF16) or fp32 (F32); C is fp32 row-major.
  virtual void gemm(MatPrec prec, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    const void* A, const void* B, float* C, bool accumulate) = 0;
  // Builds whatever a gemm shape needs before it is first timed (JIT kernels, plans). Optional.
  virtual void prepare_gemm(MatPrec prec, bool trans_a, bool trans_b, int64_t M, int64_t N,
                            int64_t K) {}
  virtual void f32_to_bf16(const float* x, bf16* y, int64_t n) = 0;
  virtual void bf16_to_f32(const bf16* x, float* y, int64_t n) = 0;
  // dst = src in dtype `to` (a copy for F32, a rounding for BF16).
  void convert(const float* src, void* dst, int64_t n, DType to);

  // The linear layer y = x W^T (W stored [out, in]), written with gemm.
  void linear_fwd(MatPrec p, const void* x, const void* W, float* y, int64_t N, int64_t in,
                  int64_t out) {
    gemm(p, false, true, N, out, in, x, W, y, false);
  }
  void linear_bwd_input(MatPrec p, const void* dy, const void* W, float* dx, int64_t N,
                        int64_t in, int64_t out, bool accumulate) {  // dx (=/+=) dy W
    gemm(p, false, false, N, in, out, dy, W, dx, accumulate);
  }
  void linear_bwd_weight(MatPrec p, const void* dy, const void* x, float* dW, int64_t N,
                         int64_t in, int64_t out) {  // dW += dy^T x
    gemm(p, true, false, out, in, N, dy, x, dW, true);
  }

  // ---- element-wise and layer ops (shapes and rules: backend/cpu/ops.h) ----
  // `out_t` names the dtype of an output that feeds a matmul (F32 or BF16).
  virtual void embedding_fwd(const int32_t* tok, const float* wte, float* out, int64_t N,
                             int64_t C) = 0;
  virtual void embedding_bwd(const int32_t* tok, const float* dout, float* dwte, int64_t N,
                             int64_t C) = 0;
  virtual void rmsnorm_fwd(const float* x, const float* g, void* y, DType out_t, float* rstd,
                           int64_t rows, int64_t C, float eps) = 0;
  virtual void rmsnorm_bwd(const float* x, const float* g, const float* rstd, const float* dy,
                           float* dx, float* dg, int64_t rows, int64_t C) = 0;
  virtual void rope_tables(float* cos_t, float* sin_t, int T, int hd, float base) = 0;
  virtual void rope_fwd(float* x, int64_t rows, int T, int hd, const float* cos_t,
                        const float* sin_t, int pos0) = 0;
  // The many-argument ops take one struct of named fields (backend/op_args.h).
  virtual void qkv_heads_fwd(const QkvHeadsFwdArgs& a) = 0;
  virtual void qkv_heads_bwd(const QkvHeadsBwdArgs& a) = 0;
  // Causal attention; window > 0 limits each query to the `window` most recent keys (its own
  // included), window <= 0 to none (full causal).
  virtual void attention_fwd(const AttentionFwdArgs& a) = 0;
  virtual void attention_bwd(const AttentionBwdArgs& a) = 0;
  virtual void split_heads(const float* x, int64_t ld, float* y, int B, int T, int nh, int hd) = 0;
  virtual void merge_heads(const float* y, void* x, DType out_t, int64_t ld, int B, int T, int nh,
                           int hd) = 0;
  // h: the MLP pre-activation [N, Hd] ([N, 2Hd] = [up | gate] for SwiGLU); y: [N, Hd].
  virtual void activation_fwd(Activation a, const float* h, void* y, DType out_t, int64_t N,
                              int64_t Hd) = 0;
  virtual void activation_bwd(Activation a, const float* h, const float* dy, void* dh, DType out_t,
                              int64_t N, int64_t Hd) = 0;
  virtual void residual_fwd(const float* a, const float* b, float* out, int64_t n) = 0;
  // Two-term mix with weights on the device (the embedding skips): out = w[0] x + w[1] x0 (out may
  // alias x). Backward from dout: dw[0] += sum dout x, dw[1] += sum dout x0 (in double, in a fixed
  // order, so the same bits whatever the thread count), dx0 += w[1] dout, dx = w[0] dout (dx may
  // alias dout).
  virtual void mix2_fwd(const float* x, const float* x0, const float* w, float* out, int64_t n) = 0;
  virtual void mix2_bwd(const float* dout, const float* x, const float* x0, const float* w, float* dx,
                        float* dx0, float* dw, int64_t n) = 0;
  virtual void scale(float* x, float s, int64_t n) = 0;                 // x *= s
  virtual void axpy(float* y, float a, const float* x, int64_t n) = 0;  // y += a x
  // Softcap + cross-entropy (+ its gradient in place when want_grad). Returns the summed loss over
  // targets >= 0 (waits for the device); loss/argmax may be null.
  virtual double softcap_xent(const SoftcapXentArgs& a) = 0;
  virtual void softcap_fwd(float* z, int64_t n, float cap) = 0;

  // ---- optimizer ----
  // Sum of squares in double, the same bits whatever the thread count (waits for the device).
  virtual double sum_squares(const float* x, int64_t n) = 0;
  // out[i] = sum_squares(xs[i], ns[i]) for i < count, with one wait for the device in all (the
  // optimizer's per-parameter norms; a GPU would otherwise stop once per parameter).
  virtual void sum_squares_many(const float* const* xs, const int64_t* ns, int count, double* out) {
    for (int i = 0; i < count; ++i) out[i] = sum_squares(xs[i], ns[i]);
  }
  // Decoupled weight decay p *= 1 - lr wd; with `cautious` only where the update (the step
  // subtracted from p) has p's sign, i.e. already moves p towards zero.
  virtual void adamw_update(const AdamWArgs& a) = 0;
  virtual void muon_momentum(const float* grad, float* buf, float* u, int64_t n, float gscale,
                             float mu, bool nesterov) = 0;
  virtual void muon_apply(float* p, const float* o, int64_t n, float lr, float scale,
                          float wd, bool cautious) = 0;
  // NorMuon's neuron-wise normalisation of an orthogonalised update o [rows, cols], in place:
  // v[r] = beta2 v[r] + (1 - beta2) mean_c o[r,c]^2, each row divided by sqrt(v[r]) + eps, then
  // the whole rescaled to o's Frobenius norm (so the learning rate keeps Muon's calibration).
  virtual void normuon_scale(float* o, float* v, int64_t rows, int64_t cols, float beta2,
                             float eps) = 0;
  // out (rows x cols) = the Newton-Schulz orthogonalisation of G (may alias) by `sched`; matmuls in
  // `prec`.
  virtual void newton_schulz(const float* G, float* out, int64_t rows, int64_t cols,
                             const NsSchedule& sched, MatPrec prec) = 0;
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
