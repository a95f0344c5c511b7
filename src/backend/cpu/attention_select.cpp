// CLOCKLM_CPU_ATTENTION and the rule that picks the CPU attention kernel (attention_select.h).
#include "backend/cpu/attention_select.h"

#include <cstdlib>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "core/common.h"

namespace clm {

CpuAttnMode parse_cpu_attention_mode(const std::string& text, const std::string& origin) {
  if (text == "auto") return CpuAttnMode::Auto;
  if (text == "fp32") return CpuAttnMode::Fp32;
  fail("{}: unknown CPU attention '{}' (expected auto or fp32)", origin, text);
}

CpuAttnMode cpu_attention_mode_from_env() {
  const char* env = std::getenv("CLOCKLM_CPU_ATTENTION");
  if (!env || !*env) return CpuAttnMode::Auto;
  return parse_cpu_attention_mode(env, "CLOCKLM_CPU_ATTENTION");
}

const char* cpu_attention_mode_name(CpuAttnMode mode) {
  return mode == CpuAttnMode::Auto ? "auto" : "fp32";
}

bool cpu_attention_uses_bf16(CpuAttnMode mode, MatPrec prec) {
  return mode == CpuAttnMode::Auto && prec == MatPrec::BF16 && attention_bf16_available();
}

std::string cpu_attention_rule(CpuAttnMode mode) {
  if (mode == CpuAttnMode::Fp32) return "fp32 (CLOCKLM_CPU_ATTENTION=fp32)";
  if (attention_bf16_available()) return "auto: bf16 with bf16 matmuls, fp32 otherwise";
  return fmt::format("auto: fp32 (the {} kernels{} have no bf16 attention)", cpu_kernels().isa,
                     cpu_features().avx512bf16 ? "" : " on a CPU without AVX512_BF16");
}

}  // namespace clm
