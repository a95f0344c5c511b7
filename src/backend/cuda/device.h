// The device context: which accelerator (if any) this process uses. The CPU backend always works;
// the CUDA backend is compiled when nvcc is found and used only when a GPU is present at run time.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace clm {

class Backend;

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  int sm_count = 0;
};

bool cuda_compiled();                          // built with the CUDA backend?
std::vector<CudaDeviceInfo> cuda_devices();    // empty when no driver/GPU (never throws)
std::string cuda_unavailable_reason();         // why cuda_devices() is empty ("" if not empty)
// Compute capability the kernels are built for (sm_80 and newer); older devices are not usable.
constexpr int kCudaMinMajor = 8;
// The process-wide CUDA backend of device `index` (created on first use; backend/cuda/
// cuda_backend.cpp). Throws Error when the device cannot be used or CUDA is not compiled in.
// Its attention implementation is CLOCKLM_CUDA_ATTENTION's (backend/cuda/attention_select.h).
std::shared_ptr<Backend> make_cuda_backend(int index);
// The same with the attention implementation named ("auto" | "fp32" | "gemm"; "" reads
// CLOCKLM_CUDA_ATTENTION): one instance per device and implementation, for the tests and
// benchmarks that compare the implementations.
std::shared_ptr<Backend> make_cuda_backend(int index, const std::string& attention);

}  // namespace clm
