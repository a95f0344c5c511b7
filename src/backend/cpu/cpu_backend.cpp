// The CPU backend: the Backend interface over the kernels of this folder (ops.h, attention,
// oneDNN matmuls, optimizer kernels, Newton-Schulz). Ops whose kernel has their own signature are
// generated from the op list (backend/op_list.h, `table` entries); the rest are written here.
// Device memory is host memory, so memory operations are memcpy/memset and the device clock is the
// wall clock.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include <dnnl.hpp>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cpu/attention_select.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/newton_schulz.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/optim_kernels.h"
#include "core/cache_dir.h"
#include "core/common.h"
#include "core/json_parse.h"

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
      const nlohmann::json j = parse_json(read_file(path), path);
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
    return fmt::format("cpu ({} threads, matmuls in {}{}, attention {})", default_threads(),
                       c.faster ? "bf16" : "fp32", why, attention_description());
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

  void set_threads(int n) override {
    if (n > 0) omp_set_num_threads(n);
  }
  // Measured once per precision and thread count: a 2048^3 oneDNN matmul, best over ~0.3 s.
  double peak_flops(MatPrec prec) override {
    std::lock_guard<std::mutex> lock(peak_mu_);
    const auto key = std::make_pair(prec == MatPrec::BF16, omp_get_max_threads());
    auto it = peak_.find(key);
    if (it == peak_.end()) it = peak_.emplace(key, measure_matmul_flops(2048, key.first, 0.3)).first;
    return it->second;
  }

  // The ops whose kernel has the Backend op's own signature (the op list's `table` entries,
  // op_kernels.h) forward through the selected variant's kernel table.
#define CLM_BACKEND_FORWARD(field, fn, R, params, args) \
  R fn params override { return cpu_kernels().field args; }
  CLM_CPU_BACKEND_KERNELS(CLM_BACKEND_FORWARD)
#undef CLM_BACKEND_FORWARD

  void gemm(const GemmArgs& a) override { clm::gemm(a); }

  void rmsnorm_fwd(const RmsnormFwdArgs& a) override {
    // residual_rmsnorm_fwd is the plain norm where residual is null
    if (a.out_t == DType::BF16)
      clm::residual_rmsnorm_fwd(a.x, a.residual, a.sum, a.g, static_cast<bf16*>(a.y), a.rstd, a.rows, a.C, a.eps);
    else
      clm::residual_rmsnorm_fwd(a.x, a.residual, a.sum, a.g, static_cast<float*>(a.y), a.rstd, a.rows, a.C, a.eps);
  }
  void qkv_heads_fwd(const QkvHeadsFwdArgs& a) override {
    const HeadShape& s = a.shape;
    clm::qkv_heads_fwd(a.qkv, a.ve, a.tok, s.B, a.T, s.H, s.Hkv, s.hd, a.norm.on, a.norm.qg, a.norm.kg, a.norm.eps,
                       a.rope.cos_t, a.rope.sin_t, a.qraw, a.kraw, a.q_rstd, a.k_rstd, a.q, a.k, a.v);
  }
  void qkv_heads_bwd(const QkvHeadsBwdArgs& a) override {
    if (a.dqkv_t == DType::BF16) qkv_bwd(a, static_cast<bf16*>(a.dqkv));
    else qkv_bwd(a, static_cast<float*>(a.dqkv));
  }
  void attention_fwd(const AttentionFwdArgs& a) override {
    const HeadShape& s = a.shape;
    auto* fn = use_bf16_attention(a.prec) ? &clm::attention_fwd_bf16 : &clm::attention_fwd;
    fn(a.q, a.k, a.v, a.o, a.lse, s.B, s.H, s.Hkv, a.Tq, a.Tk, a.Tk_cap, s.hd, a.window);
  }
  void attention_bwd(const AttentionBwdArgs& a) override {
    const HeadShape& s = a.shape;
    auto* fn = use_bf16_attention(a.prec) ? &clm::attention_bwd_bf16 : &clm::attention_bwd;
    fn(a.q, a.k, a.v, a.o, a.lse, a.dout, a.dq, a.dk, a.dv, s.B, s.H, s.Hkv, a.T, s.hd, a.window);
  }
  void merge_heads(const MergeHeadsArgs& a) override {
    if (a.out_t == DType::BF16) clm::merge_heads(a.y, static_cast<bf16*>(a.x), a.ld, a.B, a.T, a.nh, a.hd);
    else clm::merge_heads(a.y, static_cast<float*>(a.x), a.ld, a.B, a.T, a.nh, a.hd);
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
  void scale(float* x, float s, int64_t n) override {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }
  void axpy(float* y, float a, const float* x, int64_t n) override {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
  }
  // The kernel returns the chunk's sum; "device" memory is host memory, so it is added here.
  void softcap_xent(const SoftcapXentArgs& a) override {
    const double sum = clm::softcap_xent(a.logits, a.targets, a.N, a.V, a.Vp, a.row_stride(), a.cap, a.loss,
                                         a.argmax, a.want_grad, a.grad_scale, a.grad_bf16);
    if (a.loss_sum) *a.loss_sum += sum;
  }

  void sum_squares_many(const float* const* xs, const int64_t* ns, int count, double* out) override {
    for (int i = 0; i < count; ++i) out[i] = clm::sum_squares(xs[i], ns[i]);
  }
  // The step's scalars are read from their "device" structs (host memory here).
  void adamw_update(const AdamWArgs& a) override {
    if (!a.clip->finite) return;
    const AdamWHyper& h = a.hyper;
    const GroupStep& s = *a.step;
    clm::adamw_update(a.p, a.grad, a.m, a.v, a.n, a.clip->gscale, s.lr, h.beta1, h.beta2, h.eps, s.wd, s.t,
                      h.cautious);
  }
  void newton_schulz(const float* G, float* out, int64_t rows, int64_t cols, const NsSchedule& sched,
                     MatPrec prec) override {
    std::lock_guard<std::mutex> lock(ns_mu_);
    ns_.run(G, out, rows, cols, sched, prec == MatPrec::BF16);
  }
  void newton_schulz_many(const NewtonSchulzManyArgs& a) override {
    std::lock_guard<std::mutex> lock(ns_mu_);
    ns_.run_many(a.G, a.out, a.rows, a.cols, a.count, *a.sched, a.prec == MatPrec::BF16);
  }

 private:
  // Picks the kernel for one call (attention_select.h) and remembers it for the description.
  bool use_bf16_attention(MatPrec prec) {
    const bool bf16 = cpu_attention_uses_bf16(attn_mode_, prec);
    last_attention_.store(bf16 ? 2 : 1, std::memory_order_relaxed);
    return bf16;
  }
  // The kernel of the latest attention call ("bf16" or "fp32"; the backend is shared by the whole
  // process, and a model calls it at one precision), or the rule before any call.
  std::string attention_description() const {
    const int last = last_attention_.load(std::memory_order_relaxed);
    return last == 0 ? cpu_attention_rule(attn_mode_) : last == 2 ? "bf16" : "fp32";
  }

  const CpuAttnMode attn_mode_ = cpu_attention_mode_from_env();
  std::atomic<int> last_attention_{0};  // 0: none yet, 1: fp32, 2: bf16

  template <typename OutT>
  static void qkv_bwd(const QkvHeadsBwdArgs& a, OutT* dqkv) {
    const HeadShape& s = a.shape;
    clm::qkv_heads_bwd(a.dq, a.dk, a.dv, a.qraw, a.kraw, a.q_rstd, a.k_rstd, a.norm.qg, a.norm.kg, a.dqg,
                       a.dkg, s.B, a.T, s.H, s.Hkv, s.hd, a.norm.on, a.rope.cos_t, a.rope.sin_t, dqkv);
  }
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

  std::mutex peak_mu_;
  std::map<std::pair<bool, int>, double> peak_;  // peak_flops by (bf16, threads)
  NewtonSchulz ns_;  // its scratch and primitive cache, shared by every optimizer on this backend
  std::mutex ns_mu_;
};

}  // namespace

Backend& cpu_backend_instance() {
  static CpuBackend be;
  return be;
}

}  // namespace clm
