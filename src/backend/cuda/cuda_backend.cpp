// The CUDA backend: the Backend interface on one GPU. Every op is enqueued on the backend's one
// stream, so ops run in issue order and nothing waits for the device except what the interface
// says waits (to_host, synchronize, a timer's stop): ops that produce a value (losses, norms)
// write it to device memory.
// Kernels live in ops.cu, attention.cu, attention_gemm.cu and optim.cu (and cuDNN's, through
// attention_cudnn.h); this file is host code:
// memory, cuBLASLt matmuls (descriptors and the chosen algorithm cached per shape), Newton-Schulz
// as a chain of those matmuls, the attention implementation per shape (attention_select.h), and
// the scratch buffers the kernels borrow. The ops whose launcher is the whole op (`stream` in
// backend/op_list.h) are generated from the op list; the rest are written here.
//
// Matmuls: fp32 accumulation always (CUBLAS_COMPUTE_32F); fp32 inputs are multiplied in true fp32
// (no TF32), as on the CPU, so both backends mean the same thing by "fp32".
#ifdef CLOCKLM_HAVE_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/attention_gemm.h"
#include "backend/cuda/attention_select.h"
#include "backend/cuda/cudnn_loader.h"
#include "backend/cuda/device.h"
#include "backend/cuda/kernels.h"
#include "backend/ns_groups.h"
#include "core/common.h"

namespace clm {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error so the process can go on reporting it
    fail("cuda: {}: {}", what, cudaGetErrorString(e));
  }
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cublas: {}: {}", what, cublasGetStatusString(s));
}

struct CudaTimer : DeviceTimer {
  cudaStream_t st;
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  explicit CudaTimer(cudaStream_t s) : st(s) {
    check(cudaEventCreate(&t0), "cudaEventCreate");
    check(cudaEventCreate(&t1), "cudaEventCreate");
  }
  ~CudaTimer() override {
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
  }
  void start() override { check(cudaEventRecord(t0, st), "cudaEventRecord"); }
  double stop() override {
    check(cudaEventRecord(t1, st), "cudaEventRecord");
    check(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
    return double(ms) * 1e-3;
  }
};

// Largest power of two (up to 16) dividing the address: what cuBLASLt may assume of a pointer.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 16;
  while (al > 1 && a % uintptr_t(al) != 0) al /= 2;
  return al;
}

// One matmul shape's cuBLASLt plan: the operation, the three layouts and the algorithm the
// heuristic chose (lt false: cuBLASLt offered none, cublasGemmEx is used instead).
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool lt = false;
};

// The row strides (leading dimensions, in elements) of a matmul's stored A, B and C (CudaBackend::matmul).
struct Lds {
  int64_t a = 0, b = 0, c = 0;
};

class CudaBackend;

// A CUDA graph of recorded ops (Backend::record), launched on the backend's stream.
class CudaRecording final : public Recording {
 public:
  CudaRecording(CudaBackend& be, cudaGraphExec_t exec, uint64_t epoch) : be_(be), exec_(exec), epoch_(epoch) {}
  ~CudaRecording() override { cudaGraphExecDestroy(exec_); }
  bool replay() override;

 private:
  CudaBackend& be_;
  cudaGraphExec_t exec_;
  uint64_t epoch_;  // the backend's memory epoch the graph's pointers belong to
};

class CudaBackend final : public Backend {
  friend class CudaRecording;

 public:
  CudaBackend(const CudaDeviceInfo& info, cuda::AttnMode attention)
      : info_(info), dev_(info.index), attn_mode_(attention) {
    check(cudaSetDevice(dev_), "cudaSetDevice");
    check(cudaDeviceGetAttribute(&smem_optin_, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_),
          "cudaDeviceGetAttribute");
    check(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking), "cudaStreamCreate");
    const char* sync = std::getenv("CLOCKLM_CUDA_SYNC");
    sync_each_op_ = sync && std::string(sync) == "1";
    check(cublasLtCreate(&lt_), "cublasLtCreate");
    check(cublasCreate(&blas_), "cublasCreate");
    check(cublasSetStream(blas_, st_), "cublasSetStream");
    check(cudaMalloc(&workspace_, kWorkspace), "cudaMalloc (matmul workspace)");
  }
  // Never destroyed: one instance per device and attention implementation lives for the process
  // (see make_cuda_backend), so no CUDA call runs after the runtime has shut down at exit.
  ~CudaBackend() override = default;

  // ---- identity ----
  std::string name() const override { return fmt::format("cuda:{}", dev_); }
  std::string description() const override {
    return fmt::format(
        "cuda:{} ({}, sm_{}{}, {} SMs, {:.1f} GiB, cuBLASLt matmuls, Newton-Schulz {}, attention {})", dev_,
        info_.name, info_.cc_major, info_.cc_minor, info_.sm_count,
        double(info_.total_memory) / double(1ull << 30), ns_batched_from_env() ? "batched" : "loop",
        attention_description());
  }
  bool host_visible() const override { return false; }
  bool native_bf16() const override { return info_.cc_major >= 8; }

  // ---- memory ----
  size_t memory_capacity() const override { return info_.total_memory; }
  void* alloc(size_t bytes) override {
    use();
    refuse_while_recording("alloc");
    void* p = nullptr;
    const size_t n = std::max<size_t>(bytes, 64);
    const cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      fail("out of memory allocating {} MiB on {}", n >> 20, name());
    }
    // Anything else (typically a sticky fault of an earlier kernel) is not a lack of memory.
    check(e, "cudaMalloc");
    check(cudaMemsetAsync(p, 0, n, st_), "cudaMemsetAsync");  // stream-ordered before any use
    return p;
  }
  // Never throws: DeviceBuffer's destructor calls it, also while an Error from a failed op unwinds
  // the stack, and a throw there would end the process (std::terminate) instead of reporting that
  // Error. After a kernel fault every call fails the same way (the error is sticky), so the next
  // checked call, or the one unwinding, reports it; the memory goes with the broken context.
  void free(void* p) override {
    if (!p) return;
    if (capturing_) {  // waiting would break the capture: freed once it ends
      deferred_frees_.push_back(p);
      return;
    }
    // Work still queued may read p; wait for it (frees are rare: models, scratch growth).
    if (cudaSetDevice(dev_) != cudaSuccess || cudaStreamSynchronize(st_) != cudaSuccess ||
        cudaFree(p) != cudaSuccess)
      cudaGetLastError();  // clear a non-sticky error so it is not blamed on a later op
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    use();
    refuse_while_recording("to_device");
    // From pageable memory the copy is staged before this returns, so `src` may change afterwards.
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st_), "to_device");
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    use();
    refuse_while_recording("to_host");
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st_), "to_host");
    check(cudaStreamSynchronize(st_), "to_host (a kernel before it failed)");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (!bytes || dst == src) return;
    use();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st_), "copy");
  }
  void zero(void* dst, size_t bytes) override {
    if (!bytes) return;
    use();
    check(cudaMemsetAsync(dst, 0, bytes, st_), "zero");
  }
  void synchronize() override {
    use();
    refuse_while_recording("synchronize");
    check(cudaStreamSynchronize(st_), "synchronize (a kernel before it failed)");
  }
  std::unique_ptr<DeviceTimer> timer() override {
    use();
    refuse_while_recording("timer");
    return std::make_unique<CudaTimer>(st_);
  }

  // ---- recording: stream capture into a CUDA graph ----
  bool can_record() const override { return true; }
  std::unique_ptr<Recording> record(const std::function<void()>& issue) override {
    use();
    refuse_while_recording("record");
    // Thread-local mode: a call from this thread that would break the capture (a synchronous
    // copy, a cudaMalloc) fails at once instead of corrupting the graph.
    check(cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    capturing_ = true;
    cudaGraph_t graph = nullptr;
    try {
      issue();
    } catch (...) {
      cudaStreamEndCapture(st_, &graph);  // ends the capture whatever it holds
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      end_capture_frees();
      throw;
    }
    const cudaError_t ended = cudaStreamEndCapture(st_, &graph);
    end_capture_frees();
    check(ended, "cudaStreamEndCapture (an op of the step could not be recorded)");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(e, "cudaGraphInstantiate");
    return std::make_unique<CudaRecording>(*this, exec, epoch_);
  }

  // ---- host threads and peak throughput ----
  // Every op runs on the device; the threads are the host side's (data, CPU-side work) OpenMP count.
  void set_threads(int n) override {
    if (n > 0) omp_set_num_threads(n);
  }
  double peak_flops(MatPrec prec) override {
    std::lock_guard<std::mutex> lock(peak_mu_);
    double& v = peak_[prec == MatPrec::BF16 ? 0 : 1];
    if (v == 0) v = measure_peak(prec);
    return v;
  }

  // Best FLOP/s of a 4096^3 cuBLASLt gemm in `prec` over five timed runs after a warm-up.
  double measure_peak(MatPrec prec) {
    const int64_t n = 4096;
    const size_t in_bytes = size_t(n * n) * dtype_size(matmul_dtype(prec));
    void* A = alloc(in_bytes);
    void* B = alloc(in_bytes);
    float* C = static_cast<float*>(alloc(size_t(n * n) * 4));
    const GemmArgs g{.prec = prec, .M = n, .N = n, .K = n, .A = A, .B = B, .C = C};
    gemm(g);
    auto t = timer();
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      t->start();
      gemm(g);
      best = std::max(best, 2.0 * double(n) * double(n) * double(n) / t->stop());
    }
    free(A);
    free(B);
    free(C);
    return best;
  }

  // ---- matmul and conversions ----
  void gemm(const GemmArgs& a) override {
    use();
    if (a.K <= 0 && a.M > 0 && a.N > 0) {  // an empty sum: C = 0, or C unchanged
      if (!a.accumulate)
        check(cudaMemset2DAsync(a.C, size_t(a.c_ld()) * 4, 0, size_t(a.N) * 4, size_t(a.M), st_), "cudaMemset2D");
    } else {
      matmul(a.prec, a.trans_a, a.trans_b, a.M, a.N, a.K, a.A, a.B, a.C, a.C, 1.0f, a.accumulate ? 1.0f : 0.0f, 1,
             {a.a_ld(), a.b_ld(), a.c_ld()});
    }
    launched("gemm");
  }
  void prepare_gemm(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K) override {
    if (M > 0 && N > 0 && K > 0) {
      use();
      plan(prec, ta, tb, M, N, K, 16, 16, 16, 1, packed_lds(ta, tb, M, N, K));
    }
  }

  // ---- the ops whose launcher is the whole op (the op list's `stream` entries, kernels.h) ----
#define CLM_CUDA_FORWARD(name, R, params, args)                                  \
  R name params override {                                                       \
    static_assert(std::is_void_v<R>, #name ": a `stream` op returns nothing");   \
    use();                                                                       \
    cuda::name(st_, CLM_OP_UNPAREN args);                                        \
    launched(#name);                                                             \
  }
  CLM_CUDA_STREAM_OPS(CLM_CUDA_FORWARD)
#undef CLM_CUDA_FORWARD

  // ---- layers ----
  void embedding_bwd(const int32_t* tok, const float* dout, float* dwte, int64_t N,
                     int64_t C) override {
    use();
    cuda::embedding_bwd(st_, tok, dout, dwte, N, C, scratch(cuda::embedding_bwd_scratch(N)));
    launched("embedding_bwd");
  }
  void embed_smear_bwd(const EmbedSmearBwdArgs& a) override {
    use();
    cuda::embed_smear_bwd(st_, a, scratch(cuda::embed_smear_bwd_scratch(a.N, a.C, a.k)));
    launched("embed_smear_bwd");
  }
  void rmsnorm_fwd(const RmsnormFwdArgs& a) override {
    use();
    cuda::rmsnorm_fwd(st_, a.x, a.residual, a.sum, a.g, a.y, a.out_t == DType::BF16, a.rstd, a.rows, a.C, a.eps);
    launched("rmsnorm_fwd");
  }
  void rmsnorm_bwd(const RmsnormBwdArgs& a) override {
    use();
    cuda::rmsnorm_bwd(st_, a.x, a.g, a.rstd, a.dy, a.dx, a.dg, a.rows, a.C,
                      scratch(cuda::rmsnorm_bwd_scratch(a.rows, a.C)));
    launched("rmsnorm_bwd");
  }
  // The tables are computed on the host exactly as the CPU backend computes them (double angles,
  // libm cos/sin) and uploaded: both backends rotate by the same fp32 values.
  void rope_tables(float* cos_t, float* sin_t, int T, int hd, float base) override {
    const int h2 = hd / 2;
    std::vector<float> c(size_t(T) * h2), s(c.size());
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < h2; ++i) {
        const double ang = double(t) * std::pow(double(base), -2.0 * i / double(hd));
        c[size_t(t) * h2 + i] = float(std::cos(ang));
        s[size_t(t) * h2 + i] = float(std::sin(ang));
      }
    to_device(cos_t, c.data(), c.size() * 4);
    to_device(sin_t, s.data(), s.size() * 4);
  }
  void qkv_heads_fwd(const QkvHeadsFwdArgs& a) override {
    use();
    const HeadShape& s = a.shape;
    cuda::qkv_heads_fwd(st_, a.qkv, a.ve, a.tok, s.B, a.T, s.H, s.Hkv, s.hd, a.norm.on, a.norm.qg, a.norm.kg,
                        a.norm.eps, a.rope.cos_t, a.rope.sin_t, a.qraw, a.kraw, a.q_rstd, a.k_rstd,
                        a.q, a.k, a.v);
    launched("qkv_heads_fwd");
  }
  void qkv_heads_bwd(const QkvHeadsBwdArgs& a) override {
    use();
    const HeadShape& s = a.shape;
    cuda::qkv_heads_bwd(st_, a.dq, a.dk, a.dv, a.qraw, a.kraw, a.q_rstd, a.k_rstd, a.norm.qg,
                        a.norm.kg, a.dqg, a.dkg, s.B, a.T, s.H, s.Hkv, s.hd, a.norm.on,
                        a.rope.cos_t, a.rope.sin_t, a.dqkv, a.dqkv_t == DType::BF16,
                        scratch(cuda::qkv_heads_bwd_scratch(s.B, a.T, s.H, s.Hkv, s.hd)));
    launched("qkv_heads_bwd");
  }
  // Attention runs on the implementation of attn_mode_; under auto, on the one chosen per shape.
  void attention_fwd(const AttentionFwdArgs& a) override {
    use();
    const HeadShape& s = a.shape;
    const cuda::AttnShape key{.B = s.B, .H = s.H, .Hkv = s.Hkv, .Tq = a.Tq, .Tk = a.Tk,
                              .Tk_cap = a.Tk_cap, .hd = s.hd, .window = a.window};
    with_attention(key, [&](cuda::AttnImpl impl) {
      if (impl == cuda::AttnImpl::Fp32) {
        check_head_dim(s.hd);
        cuda::attention_fwd(st_, a.q, a.k, a.v, a.o, a.lse, s.B, s.H, s.Hkv, a.Tq, a.Tk, a.Tk_cap,
                            s.hd, a.window);
      } else if (impl == cuda::AttnImpl::Cudnn) {
        const cuda::CudnnAttnKey k = cuda::cudnn_attention_key(key);
        cudnn_->forward(k, {.q = a.q, .k = a.k, .v = a.v, .o = a.o, .lse = a.lse, .Tk_cap = a.Tk_cap},
                        scratch(cuda::cudnn_attention_scratch(k).total));
      } else {
        void* ws = scratch(cuda::attention_gemm_fwd_scratch(s.B, s.H, a.Tq, a.Tk, s.hd, a.window));
        check(cuda::attention_gemm_fwd(blas_, st_, a.q, a.k, a.v, a.o, a.lse, s.B, s.H, s.Hkv, a.Tq,
                                       a.Tk, a.Tk_cap, s.hd, a.window, ws),
              "attention_fwd (gemm)");
      }
      launched("attention_fwd");
    });
  }
  void attention_bwd(const AttentionBwdArgs& a) override {
    use();
    const HeadShape& s = a.shape;
    const cuda::AttnShape key{.backward = true, .B = s.B, .H = s.H, .Hkv = s.Hkv, .Tq = a.T,
                              .Tk = a.T, .Tk_cap = a.T, .hd = s.hd, .window = a.window};
    with_attention(key, [&](cuda::AttnImpl impl) {
      if (impl == cuda::AttnImpl::Fp32) {
        check_head_dim(s.hd);
        cuda::attention_bwd(st_, a.q, a.k, a.v, a.o, a.lse, a.dout, a.dq, a.dk, a.dv, s.B, s.H,
                            s.Hkv, a.T, s.hd, a.window,
                            scratch(cuda::attention_bwd_scratch(s.B, s.H, a.T)));
      } else if (impl == cuda::AttnImpl::Cudnn) {
        const cuda::CudnnAttnKey k = cuda::cudnn_attention_key(key);
        cudnn_->backward(k, {.q = a.q, .k = a.k, .v = a.v, .o = a.o, .lse = a.lse, .dout = a.dout,
                             .dq = a.dq, .dk = a.dk, .dv = a.dv},
                         scratch(cuda::cudnn_attention_scratch(k).total));
      } else {
        void* ws = scratch(cuda::attention_gemm_bwd_scratch(s.B, s.H, s.Hkv, a.T, s.hd, a.window));
        check(cuda::attention_gemm_bwd(blas_, st_, a.q, a.k, a.v, a.o, a.lse, a.dout, a.dq, a.dk,
                                       a.dv, s.B, s.H, s.Hkv, a.T, s.hd, a.window, ws),
              "attention_bwd (gemm)");
      }
      launched("attention_bwd");
    });
  }
  void activation_fwd(Activation a, const float* h, void* y, DType out_t, int64_t N,
                      int64_t Hd) override {
    use();
    cuda::activation_fwd(st_, act_code(a), h, y, out_t == DType::BF16, N, Hd);
    launched("activation_fwd");
  }
  void activation_bwd(Activation a, const float* h, const float* dy, void* dh, DType out_t,
                      int64_t N, int64_t Hd) override {
    use();
    cuda::activation_bwd(st_, act_code(a), h, dy, dh, out_t == DType::BF16, N, Hd);
    launched("activation_bwd");
  }
  void mix2_bwd(const Mix2BwdArgs& a) override {
    use();
    cuda::mix2_bwd(st_, a.dout, a.x, a.x0, a.w, a.dx, a.dx0, a.dw, a.n, scratch(cuda::mix2_bwd_scratch(a.n)));
    launched("mix2_bwd");
  }
  void softcap_xent(const SoftcapXentArgs& a) override {
    use();
    cuda::softcap_xent(st_, a.logits, a.targets, a.N, a.V, a.Vp, a.row_stride(), a.cap, a.loss, a.argmax, a.want_grad,
                       a.grad_scale, a.want_grad ? a.grad_bf16 : nullptr, scratch(cuda::softcap_xent_scratch(a.N)),
                       a.loss_sum);
    launched("softcap_xent");
  }

  // ---- optimizer ----
  // Each sum straight into its device double; the scratch of chunk sums is sized for the largest
  // array and reused in stream order (each total is written before the next array's chunks).
  void sum_squares_many(const float* const* xs, const int64_t* ns, int count,
                        double* out) override {
    use();
    size_t need = 8;
    for (int i = 0; i < count; ++i) need = std::max(need, cuda::sum_squares_scratch(ns[i]));
    void* s = scratch(need);
    for (int i = 0; i < count; ++i) cuda::sum_squares(st_, xs[i], ns[i], out + i, s);
    launched("sum_squares_many");
  }
  void normuon_scale(const NormuonScaleArgs& a) override {
    use();
    cuda::normuon_scale(st_, a, scratch(cuda::normuon_scale_scratch(a.rows)));
    launched("normuon_scale");
  }
  // The CPU's iteration (newton_schulz.cpp), step for step: normalise by the Frobenius norm, work
  // on the short side, per step A = X X^T, A <- c A A + b A, X <- A X + a X with that step's
  // coefficients from the schedule. bf16 precision rounds the matmul inputs (X and A) to bf16 and
  // keeps the fp32 state; small matrices run in fp32 whatever the precision (ns_uses_bf16), as on
  // the CPU. Everything stays on the device: the norm goes from the sum of squares to the scaling
  // kernel without a host round trip.
  void newton_schulz(const float* G, float* out, int64_t rows, int64_t cols, const NsSchedule& sched,
                     MatPrec prec) override {
    use();
    std::lock_guard<std::mutex> lock(ns_mu_);
    ns_one(G, out, rows, cols, sched, prec);
  }
  // CLOCKLM_CUDA_NS=batched (the default): the matrices grouped by iterated shape (ns_groups), each
  // group of two or more as one stack (ns_stack), a lone matrix as newton_schulz; =loop: one
  // newton_schulz per matrix. The iteration buffers are grown once per call, for its largest group.
  void newton_schulz_many(const NewtonSchulzManyArgs& a) override {
    use();
    std::lock_guard<std::mutex> lock(ns_mu_);
    if (!ns_batched_from_env()) {
      for (int i = 0; i < a.count; ++i) ns_one(a.G[i], a.out[i], a.rows[i], a.cols[i], *a.sched, a.prec);
      return;
    }
    const std::vector<NsGroup> groups = ns_groups(a.rows, a.cols, a.count);
    std::vector<cuda::NsMember> table;
    for (const NsGroup& g : groups)
      for (int k = 0; k < g.count(); ++k) {
        const int i = g.members[size_t(k)];
        table.push_back({a.G[i], a.out[i], g.transposed[size_t(k)] ? 1 : 0});
      }
    reserve_ns(groups, a.prec, table.size());
    auto* dtab = reinterpret_cast<cuda::NsMember*>(ns_buf(kNsTable, table.size() * sizeof(cuda::NsMember)));
    upload_ns_table(dtab, table);
    size_t first = 0;
    for (const NsGroup& g : groups) {
      if (g.count() == 1) {
        const int i = g.members[0];
        ns_one(a.G[i], a.out[i], a.rows[i], a.cols[i], *a.sched, a.prec);
      } else {
        for (int k = 0; k < g.count(); k += kMaxStack)  // the load kernels' grid.y bound
          ns_stack(dtab + first + size_t(k), std::min(kMaxStack, g.count() - k), g.a, g.b, *a.sched, a.prec);
      }
      first += size_t(g.count());
    }
  }

 private:
  static constexpr size_t kWorkspace = size_t(32) << 20;  // cuBLASLt workspace
  static constexpr int kMaxStack = 65535;  // matrices per Newton-Schulz stack (a grid dimension)

  static int act_code(Activation a) {
    return a == Activation::ReLU2 ? 0 : a == Activation::GELU ? 1 : 2;
  }
  void use() const { check(cudaSetDevice(dev_), "cudaSetDevice"); }
  void end_capture_frees() {
    capturing_ = false;
    for (void* p : deferred_frees_) free(p);
    deferred_frees_.clear();
  }
  void refuse_while_recording(const char* call) const {
    if (capturing_)
      fail("cuda: {} inside a recorded step (a recording takes only ops on memory that exists: "
           "run the step once unrecorded first)", call);
  }
  // After an op's launches: a bad launch configuration shows here; a fault inside a kernel shows at
  // the next synchronisation, named after whatever op waits. With CLOCKLM_CUDA_SYNC=1 every op
  // waits for itself, so a fault is reported with the op that caused it (for debugging; slow).
  void launched(const char* op) {
    check(cudaGetLastError(), op);
    if (sync_each_op_ && !capturing_) check(cudaStreamSynchronize(st_), op);
  }
  void check_head_dim(int hd) const {
    if (hd > cuda::attention_max_head_dim())
      fail("the CUDA fp32 attention kernels support head_dim up to {}, not {} "
           "(CLOCKLM_CUDA_ATTENTION=gemm has no limit)",
           cuda::attention_max_head_dim(), hd);
    const size_t need = cuda::attention_smem_bytes(hd);
    if (need > size_t(smem_optin_))
      fail(
          "the CUDA attention kernels need {} KiB of shared memory per block at head_dim {}; {} "
          "offers {} KiB",
          need >> 10, hd, info_.name, smem_optin_ >> 10);
  }
  bool fp32_attention_fits(int hd) const {
    return hd <= cuda::attention_max_head_dim() &&
           cuda::attention_smem_bytes(hd) <= size_t(smem_optin_);
  }

  // Whether cuDNN serves this shape: the library loaded, a handle made, the shape in its rules
  // (attention_cudnn_layout.h) and a plan built for it (once per shape; a failure is kept too).
  bool cudnn_serves(const cuda::AttnShape& key) {
    if (!cuda::cudnn_attention_unsupported(key).empty()) return false;
    if (!cudnn_ready()) return false;
    return cudnn_->prepare(cuda::cudnn_attention_key(key)).empty();
  }
  bool cudnn_ready() {
    std::lock_guard<std::mutex> lock(cudnn_mu_);
    if (cudnn_ || !cudnn_off_.empty()) return cudnn_ != nullptr;
    const cuda::CudnnLoad& lib = cuda::cudnn_library();
    if (!lib.api) {
      cudnn_off_ = lib.why;
      return false;
    }
    try {
      cudnn_ = std::make_unique<cuda::CudnnAttention>(*lib.api, st_);
    } catch (const Error& e) {
      cudnn_off_ = e.what();
    }
    return cudnn_ != nullptr;
  }
  // The implementations auto compares for a shape, in fastest_attention's order.
  std::vector<cuda::AttnImpl> attention_candidates(const cuda::AttnShape& key) {
    std::vector<cuda::AttnImpl> c;
    if (fp32_attention_fits(key.hd)) c.push_back(cuda::AttnImpl::Fp32);
    c.push_back(cuda::AttnImpl::Gemm);
    if (cudnn_serves(key)) c.push_back(cuda::AttnImpl::Cudnn);
    return c;
  }

  // Calls run(impl) once with the implementation for this shape. A forced cudnn runs gemm for a
  // shape cuDNN does not serve (recorded per shape, so the description counts them). Under auto,
  // the first call of a shape runs each candidate once (warm-up: cuBLAS and cuDNN plans,
  // scratch), times one more run of each and records the fastest (fastest_attention); the chosen
  // one runs last, so the outputs are its own. Every implementation only overwrites its outputs,
  // so running an op again changes nothing else.
  template <typename Run>
  void with_attention(const cuda::AttnShape& key, Run run) {
    using cuda::AttnImpl;
    if (attn_mode_ == cuda::AttnMode::Cudnn) {
      const AttnImpl impl = cudnn_serves(key) ? AttnImpl::Cudnn : AttnImpl::Gemm;
      if (!attn_choices_.find(key)) attn_choices_.record(key, impl);
      run(impl);
      return;
    }
    if (attn_mode_ != cuda::AttnMode::Auto) {
      run(attn_mode_ == cuda::AttnMode::Fp32 ? AttnImpl::Fp32 : AttnImpl::Gemm);
      return;
    }
    if (const auto picked = attn_choices_.find(key)) {
      run(*picked);
      return;
    }
    const std::vector<AttnImpl> cands = attention_candidates(key);
    if (cands.size() == 1) {
      run(cands[0]);
      return;
    }
    for (AttnImpl impl : cands) run(impl);
    std::vector<cuda::AttnTiming> timed;
    auto t = timer();
    for (AttnImpl impl : cands) {
      t->start();
      run(impl);
      timed.push_back({impl, t->stop()});
    }
    const AttnImpl pick = cuda::fastest_attention(timed);
    attn_choices_.record(key, pick);
    if (pick != cands.back()) run(pick);
  }
  std::string attention_description() const {
    switch (attn_mode_) {
      case cuda::AttnMode::Fp32: return "fp32 (CUDA-core tiles)";
      case cuda::AttnMode::Gemm: return "gemm (bf16 tensor-core GEMMs)";
      case cuda::AttnMode::Cudnn:
        return fmt::format("cudnn (fused flash attention, gemm where cuDNN does not serve a shape; "
                           "per shape: {})",
                           attn_choices_.summary());
      default: return fmt::format("auto, per shape: {}", attn_choices_.summary());
    }
  }

  // The optimizer passes the same matrices every step, so the member table goes up only when it
  // (or the buffer holding it) changed: a steady-state step copies nothing from the host, which a
  // CUDA graph could not capture from pageable memory anyway.
  void upload_ns_table(cuda::NsMember* dtab, const std::vector<cuda::NsMember>& table) {
    const size_t bytes = table.size() * sizeof(cuda::NsMember);
    auto same = [](const cuda::NsMember& x, const cuda::NsMember& y) { return x.G == y.G && x.out == y.out && x.tr == y.tr; };
    if (table.empty() || (dtab == ns_table_dev_ && std::equal(table.begin(), table.end(), ns_table_host_.begin(),
                                                              ns_table_host_.end(), same)))
      return;
    refuse_while_recording("newton_schulz_many (a new member table)");
    check(cudaMemcpyAsync(dtab, table.data(), bytes, cudaMemcpyHostToDevice, st_), "newton_schulz_many (member table)");
    ns_table_host_ = table;
    ns_table_dev_ = dtab;
  }
  // One matrix's iteration (newton_schulz), with ns_mu_ held.
  void ns_one(const float* G, float* out, int64_t rows, int64_t cols, const NsSchedule& sched, MatPrec prec) {
    const bool tr = ns_transposed(rows, cols);
    const int64_t a = tr ? cols : rows, b = tr ? rows : cols, n = a * b;
    float* X = ns_buf(kNsX, size_t(n) * 4);
    double* ss = reinterpret_cast<double*>(ns_buf(kNsSums, 8));
    cuda::sum_squares(st_, G, n, ss, scratch(cuda::sum_squares_scratch(n)));
    cuda::ns_load(st_, G, X, rows, cols, tr, ss, sched.norm_margin);
    launched("newton_schulz");
    X = ns_iterate(X, 1, a, b, sched, prec);
    cuda::ns_store(st_, X, out, rows, cols, tr);
    launched("newton_schulz");
  }
  // A group of same-shape matrices as one stack: load and normalise all (one batched reduction),
  // iterate with strided-batched matmuls, store each back. `members` is the group's device table.
  void ns_stack(const cuda::NsMember* members, int count, int64_t a, int64_t b, const NsSchedule& sched,
                MatPrec prec) {
    float* X = ns_buf(kNsX, size_t(count) * size_t(a * b) * 4);
    void* sums = ns_buf(kNsSums, cuda::ns_stack_scratch(count, a * b));
    cuda::ns_stack_load(st_, members, X, count, a, b, sched.norm_margin, sums);
    launched("newton_schulz_many");
    X = ns_iterate(X, count, a, b, sched, prec);
    cuda::ns_stack_store(st_, members, X, count, a, b);
    launched("newton_schulz_many");
  }
  // The schedule's steps on `count` normalised a x b matrices stored one after another from X (in
  // buffer kNsX); returns where the result lies (X or the other fp32 buffer). One matmul launch
  // per product for the whole stack.
  float* ns_iterate(float* X, int count, int64_t a, int64_t b, const NsSchedule& sched, MatPrec prec) {
    const size_t n = size_t(count) * size_t(a * b), aa = size_t(count) * size_t(a * a);
    float* A = ns_buf(kNsA, aa * 4);
    if (ns_uses_bf16(prec, a, b)) {
      auto* Xh = reinterpret_cast<bf16*>(ns_buf(kNsXh, n * 2));
      auto* Ah = reinterpret_cast<bf16*>(ns_buf(kNsAh, aa * 2));
      for (const NsStep& k : sched.steps) {
        cuda::f32_to_bf16(st_, X, Xh, int64_t(n));
        matmul(MatPrec::BF16, false, true, a, a, b, Xh, Xh, A, A, 1.0f, 0.0f, count);  // A = X X^T
        cuda::f32_to_bf16(st_, A, Ah, int64_t(aa));
        matmul(MatPrec::BF16, false, false, a, a, a, Ah, Ah, A, A, k.c, k.b, count);  // A = cAA + bA
        cuda::f32_to_bf16(st_, A, Ah, int64_t(aa));
        matmul(MatPrec::BF16, false, false, a, b, a, Ah, Xh, X, X, 1.0f, k.a, count);  // X = AX + aX
      }
      return X;
    }
    float* Y = ns_buf(kNsY, n * 4);
    float* Bm = ns_buf(kNsB, aa * 4);
    for (const NsStep& k : sched.steps) {
      matmul(MatPrec::F32, false, true, a, a, b, X, X, A, A, 1.0f, 0.0f, count);
      matmul(MatPrec::F32, false, false, a, a, a, A, A, A, Bm, k.c, k.b, count);
      matmul(MatPrec::F32, false, false, a, b, a, Bm, X, X, Y, 1.0f, k.a, count);
      std::swap(X, Y);
    }
    return X;
  }
  // Grows every iteration buffer to what the call's largest group needs, before its first launch,
  // so a call allocates at most once (and a step after the optimizer's warm-up, never).
  void reserve_ns(const std::vector<NsGroup>& groups, MatPrec prec, size_t members) {
    size_t need[kNsBuffers] = {};
    need[kNsTable] = members * sizeof(cuda::NsMember);
    for (const NsGroup& g : groups) {
      const int count = std::min(g.count(), kMaxStack);
      const size_t n = size_t(count) * size_t(g.a * g.b), aa = size_t(count) * size_t(g.a * g.a);
      const bool half = ns_uses_bf16(prec, g.a, g.b);
      const size_t want[kNsBuffers] = {n * 4, half ? 0 : n * 4, aa * 4, half ? 0 : aa * 4,
                                       half ? n * 2 : 0, half ? aa * 2 : 0,
                                       cuda::ns_stack_scratch(count, g.a * g.b), 0};
      for (int i = 0; i < kNsBuffers; ++i) need[i] = std::max(need[i], want[i]);
      if (g.count() == 1) scratch(cuda::sum_squares_scratch(g.a * g.b));
    }
    for (int i = 0; i < kNsBuffers; ++i)
      if (need[i]) ns_buf(i, need[i]);
  }
  // CLOCKLM_CUDA_NS: batched (or unset) | loop; read at each call, so one process can compare both.
  static bool ns_batched_from_env() {
    const char* v = std::getenv("CLOCKLM_CUDA_NS");
    const std::string s = v ? v : "";
    if (s.empty() || s == "batched") return true;
    if (s == "loop") return false;
    fail("CLOCKLM_CUDA_NS is '{}': expected batched or loop", s);
  }

  // Temporary device memory for one op at a time (ops run in stream order, so the next op may
  // reuse it). Grows, never shrinks.
  void* scratch(size_t bytes) { return grow(scratch_, scratch_bytes_, bytes); }
  float* ns_buf(int i, size_t bytes) {
    return static_cast<float*>(grow(ns_[i], ns_bytes_[i], bytes));
  }
  void* grow(void*& p, size_t& have, size_t want) {
    want = std::max<size_t>(want, 256);
    if (want <= have) return p;
    refuse_while_recording("scratch growth");
    ++epoch_;  // recordings that use the old buffer are stale
    if (p) free(p);
    p = nullptr;
    have = 0;
    check(cudaMalloc(&p, want), "cudaMalloc (scratch)");
    have = want;
    return p;
  }

  // ---- matmuls ----
  // Row-major D[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C (C may be D; null with beta 0), where A
  // is stored [M,K] or, trans_a, [K,M] and B [K,N] or, trans_b, [N,K].
  //
  // cuBLAS is column-major, and a row-major [r, c] matrix is the column-major [c, r] matrix (its
  // transpose) with leading dimension c. So the row-major product D = op(A) op(B) is computed as
  // the column-major product D^T = op(B)^T op(A)^T, of shape m = N, n = M, k = K:
  //   first operand  = B's memory: not trans_b: stored [K,N] row-major = column-major [N x K], ld
  //   N,
  //                    used as is (N) -> op(B)^T;  trans_b: stored [N,K] = column-major [K x N],
  //                    ld K, transposed (T) -> [N x K] = op(B)^T.
  //   second operand = A's memory: not trans_a: stored [M,K] = column-major [K x M], ld K, as is;
  //                    trans_a: stored [K,M] = column-major [M x K], ld M, transposed -> [K x M].
  //   C and D: row-major [M,N] = column-major [N x M], ld N.
  // Those leading dimensions are the packed ones; `ld` may widen them (the stored row strides of A,
  // B and C/D; all three set; only the gemm op passes them, with batch 1 and C = D).
  // batch > 1: that many products, each operand's matrices stored one after another (strides
  // M*K, K*N and M*N elements), as one strided-batched matmul.
  static Lds packed_lds(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
    return {ta ? M : K, tb ? K : N, N};
  }
  void matmul(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A,
              const void* B, const float* C, float* D, float alpha, float beta, int batch = 1, Lds ld = {}) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    if (ld.c == 0) ld = packed_lds(ta, tb, M, N, K);
    if (K <= 0) {  // an empty sum: D = beta C
      if (beta == 0.0f) {
        zero(D, size_t(M) * N * 4 * size_t(batch));
      } else {
        copy(D, C, size_t(M) * N * 4 * size_t(batch));
        if (beta != 1.0f) scale(D, beta, M * N * batch);
      }
      return;
    }
    const size_t in_size = dtype_size(matmul_dtype(prec));
    // Every matrix of a batch starts at base + k * stride, and every row at a multiple of the row
    // stride: its alignment is also the strides'.
    auto al = [batch](const void* p, size_t stride_bytes, size_t row_bytes) {
      auto of = [](size_t bytes) { return alignment_of(reinterpret_cast<const void*>(bytes)); };
      const int a = std::min(alignment_of(p), of(row_bytes));
      return batch > 1 ? std::min(a, of(stride_bytes)) : a;
    };
    const GemmPlan& p = plan(prec, ta, tb, M, N, K, al(A, size_t(M * K) * in_size, size_t(ld.a) * in_size),
                             al(B, size_t(K * N) * in_size, size_t(ld.b) * in_size),
                             std::min(al(C ? C : D, size_t(M * N) * 4, size_t(ld.c) * 4),
                                      al(D, size_t(M * N) * 4, size_t(ld.c) * 4)),
                             batch, ld);
    if (!C) C = D;
    if (p.lt) {
      check(cublasLtMatmul(lt_, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, D, p.c, &p.algo,
                           workspace_, kWorkspace, st_),
            "cublasLtMatmul");
      return;
    }
    // Fallback (shapes cuBLASLt has no algorithm for, e.g. odd leading dimensions in bf16).
    if (beta != 0.0f && C != D) copy(D, C, size_t(M) * N * 4 * size_t(batch));
    const cudaDataType_t in = prec == MatPrec::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    if (batch > 1) {
      check(cublasGemmStridedBatchedEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       int(N), int(M), int(K), &alpha, B, in, int(ld.b), K * N, A, in,
                                       int(ld.a), M * K, &beta, D, CUDA_R_32F, int(ld.c), M * N, batch,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx");
      return;
    }
    check(
        cublasGemmEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(N),
                     int(M), int(K), &alpha, B, in, int(ld.b), A, in, int(ld.a), &beta,
                     D, CUDA_R_32F, int(ld.c), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  const GemmPlan& plan(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int al_a,
                       int al_b, int al_c, int batch, Lds ld) {
    const auto key = std::make_tuple(int(prec), ta, tb, M, N, K, al_a, al_b, al_c, batch, ld.a, ld.b, ld.c);
    std::lock_guard<std::mutex> lock(plans_mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    GemmPlan p;
    const cudaDataType_t in = prec == MatPrec::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                            opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa),
          "transa");
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb),
          "transb");
    // Stored shapes (rows x cols, column-major) of the two operands, as derived above matmul().
    check(tb ? cublasLtMatrixLayoutCreate(&p.a, in, uint64_t(K), uint64_t(N), ld.b)
             : cublasLtMatrixLayoutCreate(&p.a, in, uint64_t(N), uint64_t(K), ld.b),
          "layout");
    check(ta ? cublasLtMatrixLayoutCreate(&p.b, in, uint64_t(M), uint64_t(K), ld.a)
             : cublasLtMatrixLayoutCreate(&p.b, in, uint64_t(K), uint64_t(M), ld.a),
          "layout");
    check(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, uint64_t(N), uint64_t(M), ld.c), "layout");
    if (batch > 1) {
      set_batch(p.a, batch, K * N);
      set_batch(p.b, batch, M * K);
      set_batch(p.c, batch, M * N);
    }
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t ws = kWorkspace;
    const uint32_t a_b = uint32_t(al_b), b_a = uint32_t(al_a), c_c = uint32_t(al_c);
    // Checked: without the alignment limits the heuristic may pick an algorithm that assumes
    // 16-byte aligned pointers, which faults on an offset into a buffer.
    cublasStatus_t ps =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws);
    // The first operand is B's memory, the second A's.
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const uint32_t*> als[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_c}};
    for (const auto& [attr, v] : als)
      if (ps == CUBLAS_STATUS_SUCCESS)
        ps = cublasLtMatmulPreferenceSetAttribute(pref, attr, v, sizeof *v);
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t s =
        ps == CUBLAS_STATUS_SUCCESS
            ? cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found)
            : ps;
    cublasLtMatmulPreferenceDestroy(pref);
    check(ps, "matmul preference");
    p.lt = s == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p.lt) p.algo = res.algo;
    return plans_.emplace(key, p).first->second;
  }

  // A layout of `batch` matrices, `stride` elements apart.
  static void set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride) {
    const int32_t n = batch;
    check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n), "batch count");
    check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          "batch stride");
  }

  CudaDeviceInfo info_;
  int dev_;
  int smem_optin_ = 0;         // shared memory per block a kernel may opt in to
  cuda::AttnMode attn_mode_;   // CLOCKLM_CUDA_ATTENTION or make_cuda_backend's choice
  cuda::AttnChoices attn_choices_;  // auto's implementation per shape (cudnn's fallbacks too)
  std::mutex cudnn_mu_;
  std::unique_ptr<cuda::CudnnAttention> cudnn_;  // made on the first shape cuDNN could serve
  std::string cudnn_off_;  // why cuDNN is not used by this backend (empty: not tried, or in use)
  std::mutex peak_mu_;
  double peak_[2] = {0, 0};  // peak_flops: bf16, fp32 (0: not measured yet)
  bool sync_each_op_ = false;  // CLOCKLM_CUDA_SYNC=1
  bool capturing_ = false;     // inside record(): ops go into a graph
  uint64_t epoch_ = 0;         // advances whenever a buffer the ops borrow moves
  std::vector<void*> deferred_frees_;  // freed inside a recording, released when it ends
  cudaStream_t st_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  // Newton-Schulz iteration buffers (ns_buf's index): the stack X and its fp32 partner Y, A = X X^T
  // and the fp32 path's polynomial in A, X's and A's bf16 copies, the sums of squares, the member table.
  enum { kNsX, kNsY, kNsA, kNsB, kNsXh, kNsAh, kNsSums, kNsTable, kNsBuffers };
  std::vector<cuda::NsMember> ns_table_host_;  // what the device's member table holds now
  const cuda::NsMember* ns_table_dev_ = nullptr;
  void* ns_[kNsBuffers] = {};
  size_t ns_bytes_[kNsBuffers] = {};
  std::mutex ns_mu_, plans_mu_;
  std::map<std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int, int, int, int, int64_t, int64_t, int64_t>,
           GemmPlan>
      plans_;
};

bool CudaRecording::replay() {
  if (be_.epoch_ != epoch_) return false;
  be_.use();
  check(cudaGraphLaunch(exec_, be_.st_), "cudaGraphLaunch");
  return true;
}

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int index) { return make_cuda_backend(index, ""); }

std::shared_ptr<Backend> make_cuda_backend(int index, const std::string& attention) {
  const cuda::AttnMode mode =
      attention.empty() ? cuda::attention_mode_from_env()
                        : cuda::parse_attention_mode(attention, "cuda:" + std::to_string(index));
  static std::mutex mu;
  // One per device and attention implementation, for the whole process.
  static std::map<std::pair<int, cuda::AttnMode>, CudaBackend*> made;
  std::lock_guard<std::mutex> lock(mu);
  auto it = made.find({index, mode});
  if (it == made.end()) {
    const std::vector<CudaDeviceInfo> devs = cuda_devices();
    if (index < 0 || index >= int(devs.size())) fail("cuda:{}: no such device", index);
    it = made.emplace(std::make_pair(index, mode), new CudaBackend(devs[size_t(index)], mode))
             .first;
  }
  return std::shared_ptr<Backend>(it->second, [](Backend*) {});
}

}  // namespace clm

#endif  // CLOCKLM_HAVE_CUDA
