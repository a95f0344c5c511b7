// What every backend shares: tensors and device buffers, conversions written on the interface,
// backend selection by name (--device) and the resolution of the `auto` matmul precision.
#include "backend/backend.h"

#include <algorithm>

#include "backend/cuda/attention_select.h"
#include "backend/cuda/device.h"
#include "core/common.h"

namespace clm {

Backend& cpu_backend_instance();  // backend/cpu/cpu_backend.cpp

Activation activation_from_name(const std::string& name) {
  if (name == "relu2") return Activation::ReLU2;
  if (name == "gelu") return Activation::GELU;
  if (name == "swiglu") return Activation::SwiGLU;
  fail("unknown activation '{}' (relu2 | gelu | swiglu)", name);
}

void Backend::convert(const float* src, void* dst, int64_t n, DType to) {
  if (to == DType::BF16) {
    f32_to_bf16(src, static_cast<bf16*>(dst), n);
  } else if (to == DType::F32) {
    if (static_cast<const void*>(src) != dst) copy(dst, src, size_t(n) * 4);
  } else {
    fail("backend: cannot convert fp32 to {}", dtype_name(to));
  }
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    be_ = o.be_;
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (p_) be_->free(p_);
  p_ = nullptr;
  bytes_ = 0;
}

Backend& cpu_backend() { return cpu_backend_instance(); }

namespace {

// The first device the CUDA kernels run on (compute capability 8.0 or newer), or -1.
int first_usable_cuda() {
  if (!cuda_compiled()) return -1;
  for (const CudaDeviceInfo& d : cuda_devices())
    if (d.cc_major >= kCudaMinMajor) return d.index;
  return -1;
}

}  // namespace

std::shared_ptr<Backend> make_backend(const std::string& name) {
  // The CPU backend is process-wide (one oneDNN engine, one thread pool); callers share it. So is
  // each GPU's backend (one stream, cuBLASLt handle and plans per device).
  std::shared_ptr<Backend> cpu(&cpu_backend_instance(), [](Backend*) {});
  if (name == "cpu") return cpu;
  if (name == "auto") {
    const int dev = first_usable_cuda();
    if (dev < 0) return cpu;
    cuda::attention_mode_from_env();  // a bad CLOCKLM_CUDA_ATTENTION is an error, not a CPU fallback
    try {
      return make_cuda_backend(dev);
    } catch (const Error&) {
      return cpu;  // a GPU that cannot be set up (busy, out of memory): the CPU is the best present
    }
  }
  if (name == "cuda" || name.starts_with("cuda:")) {
    if (!cuda_compiled()) fail("--device {}: {}", name, cuda_unavailable_reason());
    int index = 0;
    if (name != "cuda") {
      const std::string digits = name.substr(5);
      if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos)
        fail("--device '{}': expected cuda:N with N a device index", name);
      index = std::stoi(digits);
    }
    const std::vector<CudaDeviceInfo> devs = cuda_devices();
    if (devs.empty()) fail("--device {}: no CUDA device is usable ({})", name, cuda_unavailable_reason());
    if (index >= int(devs.size()))
      fail("--device {}: this machine has {} CUDA device(s), cuda:0 to cuda:{}", name, devs.size(),
           devs.size() - 1);
    const CudaDeviceInfo& d = devs[size_t(index)];
    if (d.cc_major < kCudaMinMajor)
      fail("--device {}: {} has compute capability {}.{}; the CUDA kernels need {}.0 or newer", name,
           d.name, d.cc_major, d.cc_minor, kCudaMinMajor);
    return make_cuda_backend(index);
  }
  fail("--device '{}' is unknown (cpu | cuda | cuda:N | auto)", name);
}

std::vector<std::string> available_backends() {
  std::vector<std::string> out{"cpu"};
  if (cuda_compiled())
    for (const CudaDeviceInfo& d : cuda_devices())
      if (d.cc_major >= kCudaMinMajor) out.push_back(fmt::format("cuda:{}", d.index));
  return out;
}

NsSchedule NsSchedule::quintic(int steps) {
  NsSchedule s;
  s.steps.assign(size_t(std::max(steps, 0)), NsStep{3.4445f, -4.7750f, 2.0315f});
  return s;
}

NsSchedule NsSchedule::polar_express(int steps) {
  static constexpr NsStep kPolar[5] = {
      {8.156554524902461f, -22.48329292557795f, 15.878769915207462f},
      {4.042929935166739f, -2.808917465908714f, 0.5000178451051316f},
      {3.8916678022926607f, -2.772484153217685f, 0.5060648178503393f},
      {3.285753657755655f, -2.3681294933425376f, 0.46449024233003106f},
      {2.3465413258596377f, -1.7097828382687081f, 0.42323551169305323f},
  };
  NsSchedule s;
  s.norm_margin = 1.02f;
  for (int i = 0; i < steps; ++i) s.steps.push_back(kPolar[std::min(i, 4)]);
  return s;
}

NsSchedule ns_schedule(const std::string& name, int steps) {
  if (name == "quintic") return NsSchedule::quintic(steps);
  if (name == "polar") return NsSchedule::polar_express(steps);
  fail("Newton-Schulz coefficients '{}' are unknown (quintic, polar)", name);
}

std::unique_ptr<Recording> Backend::record(const std::function<void()>&) {
  fail("{} cannot record ops (only a GPU replays a recorded step)", name());
}

bool prefer_bf16(double bf16_seconds, double fp32_seconds) {
  return bf16_seconds > 0 && bf16_seconds * 1.25 <= fp32_seconds;
}

MatPrec resolve_precision(const std::string& setting, const Backend& be) {
  if (setting == "bf16") return MatPrec::BF16;
  if (setting == "fp32") return MatPrec::F32;
  if (setting == "auto") return be.native_bf16() ? MatPrec::BF16 : MatPrec::F32;
  fail("matmul precision '{}' is unknown (auto | bf16 | fp32)", setting);
}

void check_fits_memory(const Backend& be, size_t need, const std::string& what) {
  const size_t have = be.memory_capacity();
  if (need > have)
    fail("{} needs about {:.2f} GiB, but the {} device has {:.2f} GiB of memory; use a smaller model, "
         "micro-batch or sequence length",
         what, double(need) / double(1ull << 30), be.name(), double(have) / double(1ull << 30));
}

}  // namespace clm
