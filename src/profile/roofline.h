// Roofline of this machine: measured matmul throughput (fp32 and bf16: the CPU backend's
// peak_flops, all threads) and memory bandwidth (STREAM-style copy and triad), cached per machine
// so `profile`, `bench` and reports can say how far an op is from what the hardware allows.
#pragma once
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace clm {

struct Roofline {
  std::string device = "cpu";     // "cpu" (the CUDA roofline is not measured yet)
  std::string cpu_model;
  int threads = 0;                // threads the measurement used
  double fp32_flops = 0;          // FLOP/s, best oneDNN fp32 matmul
  double bf16_flops = 0;          // FLOP/s, best oneDNN bf16 x bf16 -> fp32 matmul (0 if unsupported)
  double copy_bytes_per_s = 0;    // b[i] = a[i], counted as 2 x 4 bytes per element (STREAM rule)
  double triad_bytes_per_s = 0;   // a[i] = b[i] + s*c[i], counted as 3 x 4 bytes per element
  int matmul_size = 0;            // square matmul side used
  double array_mb = 0;            // size of each bandwidth array
  std::string measured_at;        // UTC ISO-8601

  double peak_flops() const { return bf16_flops > fp32_flops ? bf16_flops : fp32_flops; }
  double mem_bytes_per_s() const { return triad_bytes_per_s > copy_bytes_per_s ? triad_bytes_per_s : copy_bytes_per_s; }
  // FLOP per byte above which an op is compute-bound (roof = peak_flops or fp32_flops).
  double ridge(bool bf16 = true) const;
};

nlohmann::json to_json(const Roofline& r);
Roofline roofline_from_json(const nlohmann::json& j);  // throws Error on missing fields

// The side of the square gemm the CPU backend's peak_flops times (recorded as matmul_size).
inline constexpr int kPeakGemmSide = 2048;

// Measures now (the two matmul peaks, measured once per process, then about `seconds_per_test` x 2
// of bandwidth; ~4-8 s with the default). threads<=0: default_threads(). `log` (may be null) gets
// one line per measurement. array_floats: the floats per bandwidth array (the default is what the
// cache holds; tests pass small ones).
Roofline measure_roofline(double seconds_per_test = 1.5, int threads = 0, std::FILE* log = nullptr,
                          size_t array_floats = size_t(32) << 20);

// Where this machine's roofline is cached: $XDG_CACHE_HOME or ~/.cache, then
// clocklm/roofline-<hostname>-<hash of cpu model, features and threads>.json ("" if no home).
std::string roofline_cache_path(int threads = 0);
// The cached roofline of this machine, measured (and cached) first if absent or if `refresh`.
Roofline machine_roofline(bool refresh = false, int threads = 0, std::FILE* log = stderr);

}  // namespace clm
