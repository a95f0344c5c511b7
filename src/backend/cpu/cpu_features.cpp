// CPU feature detection and the selection of the kernel variant (see cpu_features.h). The selected
// variant's table is published through one atomic pointer, so a kernel call costs a load and an
// indirect call; the first call (or CLOCKLM_CPU_ISA, or set_cpu_kernel_isa) fills it under a lock.
#include "backend/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "backend/cpu/kernels.h"
#include "core/common.h"

namespace clm {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's detection also checks that the OS saves the AVX and AVX-512 register state.
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

struct Variant {
  const char* name;
  CpuKernels (*table)(const CpuFeatures&);  // null when not compiled into this build
};

// By level, lowest first.
constexpr Variant kVariants[] = {
    {"generic", &isa_generic::kernel_table},
#ifdef CLOCKLM_CPU_VARIANT_AVX2
    {"avx2", &isa_avx2::kernel_table},
#else
    {"avx2", nullptr},
#endif
#ifdef CLOCKLM_CPU_VARIANT_AVX512
    {"avx512", &isa_avx512::kernel_table},
#else
    {"avx512", nullptr},
#endif
};
constexpr int kNumVariants = int(sizeof(kVariants) / sizeof(kVariants[0]));

// The features level `level` needs that this CPU lacks, comma-separated ("" when none).
std::string missing_features(int level, const CpuFeatures& f) {
  std::string miss;
  auto need = [&](bool have, const char* what) {
    if (!have) miss += (miss.empty() ? "" : ", ") + std::string(what);
  };
  if (level >= 1) {
    need(f.avx2, "AVX2");
    need(f.fma, "FMA");
  }
  if (level >= 2) {
    need(f.avx512f, "AVX512F");
    need(f.avx512bw, "AVX512BW");
    need(f.avx512vl, "AVX512VL");
    need(f.avx512dq, "AVX512DQ");
  }
  return miss;
}

std::mutex g_mu;
CpuKernels g_tables[kNumVariants];
bool g_built[kNumVariants] = {};
std::atomic<const CpuKernels*> g_active{nullptr};

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The level named `name`, after checking it is compiled and runnable; throws otherwise.
int checked_level(const std::string& name) {
  for (int level = 0; level < kNumVariants; ++level) {
    if (name != kVariants[level].name) continue;
    if (!kVariants[level].table)
      fail("the '{}' CPU kernels are not compiled into this build (it has: {})", name,
           join(cpu_kernel_isas_compiled()));
    std::string miss = missing_features(level, cpu_features());
    if (!miss.empty()) fail("this CPU cannot run the '{}' CPU kernels: it lacks {}", name, miss);
    return level;
  }
  fail("unknown CPU kernel variant '{}' (expected generic, avx2 or avx512)", name);
}

// Makes `level` the active variant; g_mu held.
const CpuKernels* activate(int level) {
  if (!g_built[level]) {
    g_tables[level] = kVariants[level].table(cpu_features());
    g_built[level] = true;
  }
  const CpuKernels* k = &g_tables[level];
  g_active.store(k, std::memory_order_release);
  return k;
}

const CpuKernels& select_default() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (const CpuKernels* k = g_active.load(std::memory_order_acquire)) return *k;
  const char* env = std::getenv("CLOCKLM_CPU_ISA");
  if (env && *env) {
    try {
      return *activate(checked_level(env));
    } catch (const Error& e) {
      fail("CLOCKLM_CPU_ISA={}: {}", env, e.what());
    }
  }
  int best = 0;
  for (int level = 0; level < kNumVariants; ++level)
    if (kVariants[level].table && missing_features(level, cpu_features()).empty()) best = level;
  return *activate(best);
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::vector<std::string> cpu_kernel_isas_compiled() {
  std::vector<std::string> out;
  for (const Variant& v : kVariants)
    if (v.table) out.push_back(v.name);
  return out;
}

std::vector<std::string> cpu_kernel_isas_usable() {
  std::vector<std::string> out;
  for (int level = 0; level < kNumVariants; ++level)
    if (kVariants[level].table && missing_features(level, cpu_features()).empty())
      out.push_back(kVariants[level].name);
  return out;
}

const CpuKernels& cpu_kernels() {
  const CpuKernels* k = g_active.load(std::memory_order_acquire);
  if (k) [[likely]]
    return *k;
  return select_default();
}

std::string cpu_kernel_isa() { return cpu_kernels().isa; }

void set_cpu_kernel_isa(const std::string& isa) {
  int level = checked_level(isa);
  std::lock_guard<std::mutex> lock(g_mu);
  activate(level);
}

}  // namespace clm
