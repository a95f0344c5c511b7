// Roofline measurement (see roofline.h). The matmul ceilings are the CPU backend's peak_flops (a
// large square gemm, the practical ceiling our kernels can reach); bandwidth uses arrays far larger
// than the last-level cache, touched in parallel with the same thread count the trainer uses.
#include "profile/roofline.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/cache_dir.h"
#include "core/common.h"
#include "core/json_parse.h"
#include "profile/runinfo.h"

namespace clm {

double Roofline::ridge(bool bf16) const {
  double peak = bf16 ? peak_flops() : fp32_flops;
  double bw = mem_bytes_per_s();
  return bw > 0 ? peak / bw : 0;
}

nlohmann::json to_json(const Roofline& r) {
  return {{"device", r.device},
          {"cpu_model", r.cpu_model},
          {"threads", r.threads},
          {"fp32_flops", r.fp32_flops},
          {"bf16_flops", r.bf16_flops},
          {"copy_bytes_per_s", r.copy_bytes_per_s},
          {"triad_bytes_per_s", r.triad_bytes_per_s},
          {"mem_bytes_per_s", r.mem_bytes_per_s()},
          {"peak_flops", r.peak_flops()},
          {"ridge_flops_per_byte", r.ridge(true)},
          {"ridge_fp32_flops_per_byte", r.ridge(false)},
          {"matmul_size", r.matmul_size},
          {"array_mb", r.array_mb},
          {"measured_at", r.measured_at}};
}

Roofline roofline_from_json(const nlohmann::json& j) {
  Roofline r;
  try {
    r.device = j.value("device", "cpu");
    r.cpu_model = j.value("cpu_model", "");
    r.threads = j.at("threads").get<int>();
    r.fp32_flops = j.at("fp32_flops").get<double>();
    r.bf16_flops = j.at("bf16_flops").get<double>();
    r.copy_bytes_per_s = j.at("copy_bytes_per_s").get<double>();
    r.triad_bytes_per_s = j.at("triad_bytes_per_s").get<double>();
    r.matmul_size = j.value("matmul_size", 0);
    r.array_mb = j.value("array_mb", 0.0);
    r.measured_at = j.value("measured_at", "");
  } catch (const nlohmann::json::exception& e) {
    fail("malformed roofline: {}", e.what());
  }
  if (r.fp32_flops <= 0 || r.mem_bytes_per_s() <= 0) fail("malformed roofline: non-positive throughput");
  return r;
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

static std::unique_ptr<float, FreeDeleter> alloc_floats(size_t n) {
  void* p = std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!p) fail("cannot allocate {} MB for the bandwidth test", n * 4 / (1 << 20));
  return std::unique_ptr<float, FreeDeleter>(static_cast<float*>(p));
}

// Best bytes/s of copy and triad over repeated passes lasting at least `seconds` each.
static void time_bandwidth(size_t n, int threads, double seconds, double& copy_bw, double& triad_bw) {
  auto A = alloc_floats(n), B = alloc_floats(n), C = alloc_floats(n);
  float *a = A.get(), *b = B.get(), *c = C.get();
  const long nn = long(n);
  // First touch in parallel with the same static schedule, so pages land near the threads using them.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long i = 0; i < nn; ++i) {
    a[i] = 1.0f;
    b[i] = 2.0f;
    c[i] = 0.5f;
  }
  auto best_of = [&](const std::function<void()>& body, double bytes_per_pass) {
    return best_rate(body, bytes_per_pass, seconds);
  };
  copy_bw = best_of(
      [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (long i = 0; i < nn; ++i) b[i] = a[i];
      },
      2.0 * 4.0 * double(n));
  const float s = 0.5f;
  triad_bw = best_of(
      [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (long i = 0; i < nn; ++i) a[i] = b[i] + s * c[i];
      },
      3.0 * 4.0 * double(n));
  volatile float sink = a[nn / 2] + b[nn / 3];  // keep the loops observable
  (void)sink;
}

Roofline measure_roofline(double seconds_per_test, int threads, std::FILE* log, size_t array_floats) {
  if (threads <= 0) threads = default_threads();
  Backend& be = cpu_backend();
  const int prev = omp_get_max_threads();
  be.set_threads(threads);
  Roofline r;
  auto m = machine_info();
  r.cpu_model = m.value("cpu_model", "unknown");
  r.threads = threads;
  r.matmul_size = kPeakGemmSide;
  if (log) std::fprintf(log, "roofline: measuring %d-thread matmul and bandwidth (~%.0f s)...\n", threads,
                        4 * seconds_per_test + 2);
  r.fp32_flops = be.peak_flops(MatPrec::F32);
  if (log) std::fprintf(log, "roofline: fp32 matmul %d^3: %.1f GFLOP/s\n", r.matmul_size, r.fp32_flops / 1e9);
  r.bf16_flops = be.peak_flops(MatPrec::BF16);
  if (log && r.bf16_flops > 0)
    std::fprintf(log, "roofline: bf16 matmul %d^3: %.1f GFLOP/s\n", r.matmul_size, r.bf16_flops / 1e9);
  else if (log)
    std::fprintf(log, "roofline: bf16 matmul: none on this CPU\n");
  size_t n = array_floats;  // default 32M floats = 128 MB per array: far beyond any CPU cache
  r.array_mb = double(n) * 4 / (1 << 20);
  time_bandwidth(n, threads, seconds_per_test, r.copy_bytes_per_s, r.triad_bytes_per_s);
  if (log)
    std::fprintf(log, "roofline: copy %.1f GB/s, triad %.1f GB/s\n", r.copy_bytes_per_s / 1e9,
                 r.triad_bytes_per_s / 1e9);
  r.measured_at = utc_now_iso8601();
  be.set_threads(prev);
  return r;
}

std::string roofline_cache_path(int threads) {
  if (threads <= 0) threads = default_threads();
  const std::string base = clocklm_cache_dir();
  if (base.empty()) return "";
  auto m = machine_info();
  std::string key = m.value("cpu_model", "") + "|" + m["cpu_features"].dump() + "|" + std::to_string(threads) +
                    "|" + std::to_string(m.value("logical_cpus", 0));
  uint64_t h = fnv1a64(key.data(), key.size());
  return fmt::format("{}/roofline-{}-{}.json", base, m.value("hostname", "unknown"),
                     hex64(h).substr(0, 8));
}

Roofline machine_roofline(bool refresh, int threads, std::FILE* log) {
  if (threads <= 0) threads = default_threads();
  std::string path = roofline_cache_path(threads);
  if (!refresh && !path.empty() && path_exists(path)) {
    try {
      return roofline_from_json(parse_json(read_file(path), path));
    } catch (const std::exception& e) {
      if (log) std::fprintf(log, "roofline: ignoring unreadable cache %s (%s); re-measuring\n", path.c_str(), e.what());
    }
  }
  Roofline r = measure_roofline(1.5, threads, log);
  if (!path.empty()) {
    try {
      make_dirs(path.substr(0, path.rfind('/')));
      atomic_write(path, to_json(r).dump(2) + "\n");
    } catch (const Error& e) {
      if (log) std::fprintf(log, "roofline: could not cache the result: %s\n", e.what());
    }
  }
  return r;
}

}  // namespace clm
