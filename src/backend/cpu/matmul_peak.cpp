// The CPU's practical matmul peak (matmul.h, measure_matmul_flops): a large square oneDNN matmul
// whose weights oneDNN lays out as it likes, timed repeatedly; the CPU backend's peak_flops and
// through it the roofline and MFU read it.
#include <algorithm>

#include <dnnl.hpp>

#include "backend/cpu/dnnl_context.h"
#include "backend/cpu/matmul.h"
#include "core/common.h"

namespace clm {

double measure_matmul_flops(int n, bool bf16, double seconds) {
  using namespace dnnl;
  engine& eng = cpu_engine();
  stream& strm = cpu_stream();
  auto in_dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  memory::desc a_md({n, n}, in_dt, memory::format_tag::ab);
  memory::desc b_md({n, n}, in_dt, memory::format_tag::any);  // oneDNN picks its best weights layout
  memory::desc c_md({n, n}, memory::data_type::f32, memory::format_tag::ab);
  matmul::primitive_desc pd;
  try {
    pd = matmul::primitive_desc(matmul::desc(a_md, b_md, c_md), eng);
  } catch (const dnnl::error&) {
    return 0;  // e.g. bf16 not supported on this CPU
  }
  memory a(pd.src_desc(), eng), b(pd.weights_desc(), eng), c(pd.dst_desc(), eng);
  auto fill = [](memory& m) {
    size_t bytes = m.get_desc().get_size();
    auto* p = static_cast<unsigned char*>(m.get_data_handle());
    // Small values (bit patterns that are valid small floats/bf16s) keep the FPU off denormals.
    for (size_t i = 0; i < bytes; ++i) p[i] = (i % 2) ? 0x3c : 0x00;
  };
  fill(a);
  fill(b);
  matmul prim(pd);
  auto run = [&] {
    prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    strm.wait();
  };
  return best_rate(run, 2.0 * n * double(n) * n, seconds);  // its warm-up run: JIT, page faults
}

}  // namespace clm
