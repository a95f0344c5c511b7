// CUDA device discovery for the device context (compiled only with the CUDA backend).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include "backend/cuda/device.h"

namespace clm {

bool cuda_compiled() { return true; }

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount});
  }
  return out;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    // Without the driver library the runtime reports a version mismatch; name the real cause.
    if (e == cudaErrorInsufficientDriver) {
      void* driver = dlopen("libcuda.so.1", RTLD_LAZY);
      if (!driver) return "no CUDA driver (libcuda.so.1 cannot be loaded)";
      dlclose(driver);
    }
    return cudaGetErrorString(e);
  }
  return n == 0 ? "no CUDA device present" : "";
}

}  // namespace clm
