// Which CPU attention kernel runs: fp32 products (attention.cpp) or bf16 products with fp32
// accumulation (attention_bf16.cpp). CLOCKLM_CPU_ATTENTION = auto | fp32 (unset: auto), in the
// style of CLOCKLM_CUDA_ATTENTION: auto follows the model's matmul precision (the op's `prec`) and
// takes bf16 when the running kernel variant has it (avx512 on a CPU with AVX512_BF16); fp32 keeps
// fp32 products whatever the precision. The choice depends on no timing, so every process on a
// machine makes the same one (resume stays bit-exact).
#pragma once
#include <string>

#include "backend/dtype.h"

namespace clm {

enum class CpuAttnMode { Auto, Fp32 };

// "auto" | "fp32"; anything else is an Error naming `origin` (where the text came from).
CpuAttnMode parse_cpu_attention_mode(const std::string& text, const std::string& origin);
// CLOCKLM_CPU_ATTENTION, auto when unset or empty.
CpuAttnMode cpu_attention_mode_from_env();
const char* cpu_attention_mode_name(CpuAttnMode mode);

// Whether a call with matmul precision `prec` runs the bf16 kernel under `mode`.
bool cpu_attention_uses_bf16(CpuAttnMode mode, MatPrec prec);
// What `mode` does on this CPU with the running kernel variant, e.g. "auto: bf16 with bf16
// matmuls, fp32 otherwise" or "auto: fp32 (the avx2 kernels have no bf16 attention)".
std::string cpu_attention_rule(CpuAttnMode mode);

}  // namespace clm
