// Subcommands of the experiment environment (issue 5): roofline, profile, runs, report, compare,
// leaderboard and sweep. Each callback is a thin layer over a function in src/exp/.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/common.h"
#include "exp/roofline.h"

namespace clm {

static void register_roofline(CLI::App& app) {
  auto* cmd = app.add_subcommand("roofline", "Measure (or show the cached) matmul and memory roofline of this machine");
  struct Opts {
    bool json = false, refresh = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_flag("--json", o->json, "Print the roofline as JSON");
  cmd->add_flag("--refresh", o->refresh, "Measure again even if a cached result exists");
  cmd->add_option("--threads", o->threads, "Threads to measure with (default: all)");
  cmd->callback([o] {
    auto& [json, refresh, threads] = *o;
    Roofline r = machine_roofline(refresh, threads, json ? nullptr : stderr);
    if (json) {
      auto j = to_json(r);
      j["cache"] = roofline_cache_path(threads);
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("device          %s (%s), %d threads\n", r.device.c_str(), r.cpu_model.c_str(), r.threads);
    std::printf("fp32 matmul     %8.1f GFLOP/s  (oneDNN, %d^3)\n", r.fp32_flops / 1e9, r.matmul_size);
    std::printf("bf16 matmul     %8.1f GFLOP/s  (oneDNN, bf16 in, fp32 out)\n", r.bf16_flops / 1e9);
    std::printf("memory copy     %8.1f GB/s     (%.0f MB arrays)\n", r.copy_bytes_per_s / 1e9, r.array_mb);
    std::printf("memory triad    %8.1f GB/s\n", r.triad_bytes_per_s / 1e9);
    std::printf("ridge point     %8.1f FLOP/byte (bf16 peak / bandwidth); fp32: %.1f\n", r.ridge(true), r.ridge(false));
    std::printf("measured        %s; cached in %s\n", r.measured_at.c_str(), roofline_cache_path(threads).c_str());
  });
}

void register_exp_commands(CLI::App& app) {
  register_roofline(app);
}

}  // namespace clm
