// Device discovery when clocklm is built without the CUDA backend: no devices, and why.
#ifndef CLOCKLM_HAVE_CUDA
#include "backend/backend.h"
#include "backend/cuda/device.h"
#include "core/common.h"

namespace clm {
bool cuda_compiled() { return false; }
std::vector<CudaDeviceInfo> cuda_devices() { return {}; }
std::string cuda_unavailable_reason() { return "clocklm was built without the CUDA backend"; }
std::shared_ptr<Backend> make_cuda_backend(int) { fail("clocklm was built without the CUDA backend"); }
std::shared_ptr<Backend> make_cuda_backend(int, const std::string&) {
  fail("clocklm was built without the CUDA backend");
}
}  // namespace clm
#endif
