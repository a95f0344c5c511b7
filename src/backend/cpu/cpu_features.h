// What the running CPU supports, and which kernel variant runs. The CPU kernels (ops.h,
// optim_kernels.h, the bf16 array conversions) are compiled once per instruction-set level:
// "generic" (the build's baseline: x86-64 or x86-64-v2, or ARM64), "avx2" (AVX2 + FMA) and "avx512"
// (AVX-512 F/BW/VL/DQ; with AVX512_BF16 it also converts to bf16 in hardware). At the first kernel
// call the best level the CPU supports is selected, unless the environment variable
// CLOCKLM_CPU_ISA=generic|avx2|avx512 names one. So one binary runs on any x86-64 CPU and still
// uses the wide instructions where they exist.
#pragma once
#include <string>
#include <vector>

namespace clm {

struct CpuFeatures {
  bool avx2 = false, fma = false;  // the avx2 level needs both
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;  // the avx512 level
  bool avx512bf16 = false;  // fp32 -> bf16 conversion instruction
};

// Detected once (CPU and operating-system support); all false on non-x86 CPUs.
const CpuFeatures& cpu_features();

// Kernel variants by name, lowest level first: compiled into this build, and of those the ones this
// CPU can run.
std::vector<std::string> cpu_kernel_isas_compiled();
std::vector<std::string> cpu_kernel_isas_usable();

// The variant in use ("generic", "avx2" or "avx512"); selects it if no kernel has run yet. Throws
// clm::Error when CLOCKLM_CPU_ISA names a variant that cannot run.
std::string cpu_kernel_isa();

// Switches every kernel to variant `isa` (tests and benchmarks; not while kernels are running on
// other threads). Throws clm::Error, saying why, for an unknown name, a variant this build did not
// compile, or one this CPU lacks the instructions for.
void set_cpu_kernel_isa(const std::string& isa);

}  // namespace clm
