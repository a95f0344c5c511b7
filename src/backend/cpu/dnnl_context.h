// The CPU backend's one oneDNN engine and stream (defined in matmul.cpp), shared by every oneDNN
// user: the gemm, Newton-Schulz and the roofline measurement. Internal to the CPU code. The stream
// is in-order and each caller waits for its primitives before returning.
#pragma once
#include <dnnl.hpp>

namespace clm {

dnnl::engine& cpu_engine();
dnnl::stream& cpu_stream();

// Whether oneDNN can run bf16 matmuls on this CPU (oneDNN 2.x needs AVX-512 for them). Where it
// cannot, gemm() widens bf16 inputs to fp32 and Newton-Schulz runs in fp32, so training still runs.
bool cpu_has_bf16_matmul();

}  // namespace clm
