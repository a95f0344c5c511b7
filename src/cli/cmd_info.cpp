// `clocklm info`: version, CPU threads, transports between ranks, CUDA devices (or why there are
// none), the CPU and CUDA attention implementation settings and the cuDNN library found.
#include <cstdio>

#include "cli/commands.h"
#include "core/common.h"
#include "backend/cpu/attention_select.h"
#include "backend/cuda/attention_select.h"
#include "backend/cuda/cudnn_loader.h"
#include "backend/cuda/device.h"
#include "dist/comm.h"

namespace clm {

void register_info_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show version, threads and accelerators");
  cmd->callback([] {
    std::printf("clocklm %s\n", CLOCKLM_VERSION);
    std::printf("cpu threads: %d\n", default_threads());
    std::printf("cpu attention: %s (CLOCKLM_CPU_ATTENTION: auto | fp32)\n",
                cpu_attention_rule(cpu_attention_mode_from_env()).c_str());
    std::string transports;
    for (const std::string& t : available_transports()) transports += (transports.empty() ? "" : ", ") + t;
    std::printf("transports between ranks: %s\n", transports.c_str());
    std::printf("cuda backend compiled: %s\n", cuda_compiled() ? "yes" : "no");
    if (cuda_compiled()) {
      std::printf(
          "cuda attention: %s (CLOCKLM_CUDA_ATTENTION: auto times fp32, gemm and cudnn per shape)\n",
          cuda::attention_mode_name(cuda::attention_mode_from_env()));
      std::printf("%s\n", cuda::cudnn_info_line(cuda::cudnn_library()).c_str());
    }
    auto devs = cuda_devices();
    if (devs.empty()) std::printf("cuda devices: none (%s)\n", cuda_unavailable_reason().c_str());
    for (auto& d : devs)
      std::printf("cuda device %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", d.index, d.name.c_str(), d.cc_major,
                  d.cc_minor, d.sm_count, double(d.total_memory) / (1 << 30));
  });
}

}  // namespace clm
