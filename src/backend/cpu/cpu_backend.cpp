// The CPU backend: the Backend interface over the kernels of this folder (ops.h, attention,
// oneDNN matmuls, optimizer kernels, Newton-Schulz). Device memory is host memory, so memory
// operations are memcpy/memset and the device clock is the wall clock.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include <dnnl.hpp>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/newton_schulz.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/optim_kernels.h"
#include "core/cache_dir.h"
#include "core/common.h"

namespace clm {

namespace {

struct WallTimer : DeviceTimer {
  double t0 = 0;
  void start() override { t0 = now_seconds(); }
  double stop() override { return now_seconds() - t0; }
};

// Whether bf16 matmuls (fp32 accumulation) run faster than fp32 ones on this CPU, which is what
// `auto` precision asks. Without AVX512_BF16 or AMX oneDNN emulates bf16 and fp32 is several times
// faster; AMX multiplies bf16 tiles far faster than any fp32 path. AVX512_BF16 alone decides
// nothing: on one Emerald Rapids guest whose hypervisor hides AMX, oneDNN 2.6 ran bf16 at 171
// GFLOP/s and fp32 at 312, while a Zen 4 runs bf16 about twice as fast as fp32. There the two are
// timed on a layer-sized gemm (a few tens of ms), and the verdict is cached for the machine: a
// verdict taken afresh by every process could differ between two processes on a loaded machine,
// and then a resumed run, an evaluation or another rank would multiply in another precision than
// the run it continues (no longer bit-exact).
struct Bf16Choice {
  bool faster = false;
  double ratio = 0;  // measured fp32 time / bf16 time (0: not measured)
};

// $XDG_CACHE_HOME or ~/.cache, then clocklm/bf16-choice-<hostname>-<hash of the CPU model, oneDNN's
// ISA and the logical CPUs>.json; "" without a home.
std::string bf16_choice_cache_path(int isa) {
  const std::string base = clocklm_cache_dir();
  if (base.empty()) return "";
  std::string model, line;
  std::ifstream cpuinfo("/proc/cpuinfo");
  while (model.empty() && std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 1);
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  const std::string key = fmt::format("{}|{}|{}", model, isa, ::sysconf(_SC_NPROCESSORS_ONLN));
  return fmt::format("{}/bf16-choice-{}-{}.json", base, host[0] ? host : "unknown",
                     hex64(fnv1a64(key.data(), key.size())).substr(0, 8));
}

Bf16Choice choose_bf16() {
  const auto isa = dnnl::get_effective_cpu_isa();
  if (isa == dnnl::cpu_isa::avx512_core_amx) return {true, 0};
  if (isa != dnnl::cpu_isa::avx512_core_bf16) return {false, 0};
  const std::string path = bf16_choice_cache_path(int(isa));
  if (!path.empty() && path_exists(path)) {
    try {
      const nlohmann::json j = nlohmann::json::parse(read_file(path));
      return {j.at("bf16_faster").get<bool>(), j.at("fp32_over_bf16_time").get<double>()};
    } catch (const std::exception&) {
      // unreadable: measured again below and rewritten
    }
  }
  // One thread and the best of 15 alternating repetitions (~0.1 s): the ratio is a property of a
  // core, and a gemm split over threads is slowed by any thread that another process preempts.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Bf16Timing t = time_bf16_vs_fp32(2048, 1024, 256, 15);
  omp_set_num_threads(threads);
  const Bf16Choice c{prefer_bf16(t.bf16_seconds, t.fp32_seconds), t.fp32_seconds / t.bf16_seconds};
  if (!path.empty()) {
    try {
      make_dirs(path.substr(0, path.rfind('/')));
      atomic_write(path, nlohmann::json{{"bf16_faster", c.faster}, {"fp32_over_bf16_time", c.ratio},
                                        {"gemm", "2048x1024x256"}}.dump() + "\n");
    } catch (const Error&) {
      // a read-only home: every process measures for itself, as without a cache
    }
  }
  return c;
}

const Bf16Choice& bf16_choice() {
  static const Bf16Choice c = choose_bf16();
  return c;
}

// Physical memory, or less when the process runs in a container whose cgroup caps it (v2 memory.max,
// v1 memory.limit_in_bytes; "max" or an absurd v1 value means no cap).
size_t host_memory_bytes() {
  size_t bytes = size_t(::sysconf(_SC_PHYS_PAGES)) * size_t(::sysconf(_SC_PAGESIZE));
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    std::string v;
    if (f >> v && !v.empty() && v.find_first_not_of("0123456789") == std::string::npos) {
      const unsigned long long cap = std::stoull(v);
      if (cap > 0) bytes = std::min<size_t>(bytes, size_t(cap));
    }
  }
  return bytes;
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    const Bf16Choice& c = bf16_choice();
    const std::string why = c.ratio > 0 ? fmt::format(", bf16 measured at {:.2f}x fp32's speed", c.ratio) : "";
    return fmt::format("cpu ({} threads, matmuls in {}{})", default_threads(), c.faster ? "bf16" : "fp32", why);
  }
  bool host_visible() const override { return true; }
  bool native_bf16() const override { return bf16_choice().faster; }

  size_t memory_capacity() const override {
    static const size_t v = host_memory_bytes();
    return v;
  }
  void* alloc(size_t bytes) override {
    size_t n = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, n);
    if (!p) fail("out of memory allocating {} MiB", n >> 20);
    std::memset(p, 0, n);
    return p;
  }
  void free(void* p) override { std::free(p); }
  void to_device(void* dst, const void* src, size_t bytes) override {
    if (dst != src && bytes) std::memcpy(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    if (dst != src && bytes) std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src && bytes) std::memcpy(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  void synchronize() override {}
  std::unique_ptr<DeviceTimer> timer() override { return std::make_unique<WallTimer>(); }

  void gemm(MatPrec prec, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A,
            const void* B, float* C, bool accumulate) override {
    clm::gemm(prec, ta, tb, M, N, K, A, B, C, accumulate);
  }
  void f32_to_bf16(const float* x, bf16* y, int64_t n) override { clm::f32_to_bf16(x, y, n); }
  void bf16_to_f32(const bf16* x, float* y, int64_t n) override { clm::bf16_to_f32(x, y, n); }

  void embedding_fwd(const int32_t* tok, const float* wte, float* out, int64_t N, int64_t C) override {
    clm::embedding_fwd(tok, wte, out, N, C);
  }
  void embedding_bwd(const int32_t* tok, const float* dout, float* dwte, int64_t N, int64_t C) override {
    clm::embedding_bwd(tok, dout, dwte, N, C);
  }
  void rmsnorm_fwd(const float* x, const float* g, void* y, DType out_t, float* rstd, int64_t rows,
                   int64_t C, float eps) override {
    if (out_t == DType::BF16) clm::rmsnorm_fwd(x, g, static_cast<bf16*>(y), rstd, rows, C, eps);
    else clm::rmsnorm_fwd(x, g, static_cast<float*>(y), rstd, rows, C, eps);
  }
  void rmsnorm_bwd(const float* x, const float* g, const float* rstd, const float* dy, float* dx,
                   float* dg, int64_t rows, int64_t C) override {
    clm::rmsnorm_bwd(x, g, rstd, dy, dx, dg, rows, C);
  }
  void rope_tables(float* cos_t, float* sin_t, int T, int hd, float base) override {
    clm::rope_tables(cos_t, sin_t, T, hd, base);
  }
  void rope_fwd(float* x, int64_t rows, int T, int hd, const float* cos_t, const float* sin_t,
                int pos0) override {
    clm::rope_fwd(x, rows, T, hd, cos_t, sin_t, pos0);
  }
  void qkv_heads_fwd(const float* qkv, int B, int T, int H, int Hkv, int hd, bool qk_norm,
                     const float* qg, const float* kg, float eps, const float* cos_t,
                     const float* sin_t, float* qraw, float* kraw, float* q_rstd, float* k_rstd,
                     float* q, float* k, float* v) override {
    clm::qkv_heads_fwd(qkv, B, T, H, Hkv, hd, qk_norm, qg, kg, eps, cos_t, sin_t, qraw, kraw, q_rstd,
                       k_rstd, q, k, v);
  }
  void qkv_heads_bwd(const float* dq, const float* dk, const float* dv, const float* qraw,
                     const float* kraw, const float* q_rstd, const float* k_rstd, const float* qg,
                     const float* kg, float* dqg, float* dkg, int B, int T, int H, int Hkv, int hd,
                     bool qk_norm, const float* cos_t, const float* sin_t, void* dqkv,
                     DType out_t) override {
    if (out_t == DType::BF16)
      clm::qkv_heads_bwd(dq, dk, dv, qraw, kraw, q_rstd, k_rstd, qg, kg, dqg, dkg, B, T, H, Hkv, hd,
                         qk_norm, cos_t, sin_t, static_cast<bf16*>(dqkv));
    else
      clm::qkv_heads_bwd(dq, dk, dv, qraw, kraw, q_rstd, k_rstd, qg, kg, dqg, dkg, B, T, H, Hkv, hd,
                         qk_norm, cos_t, sin_t, static_cast<float*>(dqkv));
  }
  void attention_fwd(const float* q, const float* k, const float* v, float* o, float* lse, int B,
                     int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window) override {
    clm::attention_fwd(q, k, v, o, lse, B, H, Hkv, Tq, Tk, Tk_cap, hd, window);
  }
  void attention_bwd(const float* q, const float* k, const float* v, const float* o,
                     const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                     int H, int Hkv, int T, int hd, int window) override {
    clm::attention_bwd(q, k, v, o, lse, dout, dq, dk, dv, B, H, Hkv, T, hd, window);
  }
  void split_heads(const float* x, int64_t ld, float* y, int B, int T, int nh, int hd) override {
    clm::split_heads(x, ld, y, B, T, nh, hd);
  }
  void merge_heads(const float* y, void* x, DType out_t, int64_t ld, int B, int T, int nh,
                   int hd) override {
    if (out_t == DType::BF16) clm::merge_heads(y, static_cast<bf16*>(x), ld, B, T, nh, hd);
    else clm::merge_heads(y, static_cast<float*>(x), ld, B, T, nh, hd);
  }
  void activation_fwd(Activation a, const float* h, void* y, DType out_t, int64_t N,
                      int64_t Hd) override {
    if (out_t == DType::BF16) act_fwd(a, h, static_cast<bf16*>(y), N, Hd);
    else act_fwd(a, h, static_cast<float*>(y), N, Hd);
  }
  void activation_bwd(Activation a, const float* h, const float* dy, void* dh, DType out_t,
                      int64_t N, int64_t Hd) override {
    if (out_t == DType::BF16) act_bwd(a, h, dy, static_cast<bf16*>(dh), N, Hd);
    else act_bwd(a, h, dy, static_cast<float*>(dh), N, Hd);
  }
  void residual_fwd(const float* a, const float* b, float* out, int64_t n) override {
    clm::residual_fwd(a, b, out, n);
  }
  void mix2_fwd(const float* x, const float* x0, const float* w, float* out, int64_t n) override {
    clm::mix2_fwd(x, x0, w, out, n);
  }
  void mix2_bwd(const float* dout, const float* x, const float* x0, const float* w, float* dx, float* dx0,
                float* dw, int64_t n) override {
    clm::mix2_bwd(dout, x, x0, w, dx, dx0, dw, n);
  }
  void scale(float* x, float s, int64_t n) override {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }
  void axpy(float* y, float a, const float* x, int64_t n) override {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
  }
  double softcap_xent(float* logits, const int32_t* targets, int64_t N, int V, int Vp, float cap,
                      float* loss, int32_t* argmax, bool want_grad, float grad_scale) override {
    return clm::softcap_xent(logits, targets, N, V, Vp, cap, loss, argmax, want_grad, grad_scale);
  }
  void softcap_fwd(float* z, int64_t n, float cap) override { clm::softcap_fwd(z, n, cap); }

  double sum_squares(const float* x, int64_t n) override { return clm::sum_squares(x, n); }
  void adamw_update(float* p, const float* grad, float* m, float* v, int64_t n, float gscale,
                    float lr, float beta1, float beta2, float eps, float wd, int64_t t,
                    bool cautious) override {
    clm::adamw_update(p, grad, m, v, n, gscale, lr, beta1, beta2, eps, wd, t, cautious);
  }
  void muon_momentum(const float* grad, float* buf, float* u, int64_t n, float gscale, float mu,
                     bool nesterov) override {
    clm::muon_momentum(grad, buf, u, n, gscale, mu, nesterov);
  }
  void muon_apply(float* p, const float* o, int64_t n, float lr, float scale, float wd,
                  bool cautious) override {
    clm::muon_apply(p, o, n, lr, scale, wd, cautious);
  }
  void normuon_scale(float* o, float* v, int64_t rows, int64_t cols, float beta2,
                     float eps) override {
    clm::normuon_scale(o, v, rows, cols, beta2, eps);
  }
  void newton_schulz(const float* G, float* out, int64_t rows, int64_t cols, const NsSchedule& sched,
                     MatPrec prec) override {
    std::lock_guard<std::mutex> lock(ns_mu_);
    ns_.run(G, out, rows, cols, sched, prec == MatPrec::BF16);
  }

 private:
  template <typename OutT>
  static void act_fwd(Activation a, const float* h, OutT* y, int64_t N, int64_t Hd) {
    if (a == Activation::ReLU2) clm::relu2_fwd(h, y, N * Hd);
    else if (a == Activation::GELU) clm::gelu_fwd(h, y, N * Hd);
    else clm::swiglu_fwd(h, y, N, Hd);
  }
  template <typename OutT>
  static void act_bwd(Activation a, const float* h, const float* dy, OutT* dh, int64_t N, int64_t Hd) {
    if (a == Activation::ReLU2) clm::relu2_bwd(h, dy, dh, N * Hd);
    else if (a == Activation::GELU) clm::gelu_bwd(h, dy, dh, N * Hd);
    else clm::swiglu_bwd(h, dy, dh, N, Hd);
  }

  NewtonSchulz ns_;  // its scratch and primitive cache, shared by every optimizer on this backend
  std::mutex ns_mu_;
};

}  // namespace

Backend& cpu_backend_instance() {
  static CpuBackend be;
  return be;
}

}  // namespace clm
