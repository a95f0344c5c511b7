// The CPU backend's one oneDNN engine and stream (defined in matmul.cpp), shared by every oneDNN
// user: the gemm, Newton-Schulz and the roofline measurement. Internal to the CPU code. The stream
// is in-order and each caller waits for its primitives before returning.
#pragma once
#include <dnnl.hpp>

namespace clm {

dnnl::engine& cpu_engine();
dnnl::stream& cpu_stream();

}  // namespace clm
