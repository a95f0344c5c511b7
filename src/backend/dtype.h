// Element types shared by every backend: fp32, bf16 (raw bits) and int32, and the matmul precision
// (bf16 inputs with fp32 accumulation, or fp32 throughout). Scalar fp32 <-> bf16 conversion lives
// here too, so host code (checkpoints, tests) can round exactly as the kernels do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace clm {

using bf16 = uint16_t;  // raw bfloat16 bits (upper half of an IEEE fp32)

enum class DType : uint8_t { F32, BF16, I32 };
inline size_t dtype_size(DType t) { return t == DType::BF16 ? 2 : 4; }
inline const char* dtype_name(DType t) {
  return t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "i32";
}

enum class MatPrec { BF16, F32 };
inline DType matmul_dtype(MatPrec p) { return p == MatPrec::BF16 ? DType::BF16 : DType::F32; }
inline const char* prec_name(MatPrec p) { return p == MatPrec::BF16 ? "bf16" : "fp32"; }

inline float bf16_to_f32(bf16 v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round-to-nearest-even (NaN stays a quiet NaN).
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16(u >> 16);
}

}  // namespace clm
