// The cuDNN attention's shape rules and layouts (attention_cudnn_layout.h).
#include "backend/cuda/attention_cudnn_layout.h"

#include "core/common.h"

namespace clm::cuda {

std::string cudnn_attention_unsupported(const AttnShape& s) {
  if (s.hd != 64 && s.hd != 128) return fmt::format("head_dim {} (cuDNN here: 64, 128)", s.hd);
  if (s.Hkv <= 0 || s.H % s.Hkv != 0) return fmt::format("{} heads over {} kv heads", s.H, s.Hkv);
  if (s.Tq != s.Tk) return fmt::format("{} queries over {} keys (a KV-cache call)", s.Tq, s.Tk);
  if (s.Tq <= 0 || s.B <= 0) return "an empty call";
  if (s.window < 0) return fmt::format("window {}", s.window);
  return {};
}

CudnnAttnKey cudnn_attention_key(const AttnShape& s) {
  return {.backward = s.backward, .B = s.B, .H = s.H, .Hkv = s.Hkv, .T = s.Tq, .hd = s.hd,
          .window = s.window};
}

Dims4 packed(int64_t a, int64_t b, int64_t c, int64_t d) {
  return {.dim = {a, b, c, d}, .stride = {b * c * d, c * d, d, 1}};
}

Dims4 transposed_last2(const Dims4& t) {
  Dims4 r = t;
  std::swap(r.dim[2], r.dim[3]);
  std::swap(r.stride[2], r.stride[3]);
  return r;
}

Dims4 q_dims(const CudnnAttnKey& k) { return packed(k.B, k.H, k.T, k.hd); }
Dims4 kv_dims(const CudnnAttnKey& k) { return packed(k.B, k.Hkv, k.T, k.hd); }
Dims4 score_dims(const CudnnAttnKey& k) { return packed(k.B, k.H, k.T, k.T); }
Dims4 row_dims(const CudnnAttnKey& k) { return packed(k.B, k.H, k.T, 1); }

CudnnAttnScratch cudnn_attention_scratch(const CudnnAttnKey& k) {
  const size_t q_elems = size_t(k.B) * k.H * k.T * k.hd;
  const size_t kv_elems = size_t(k.B) * k.Hkv * k.T * k.hd;
  const size_t rows = size_t(k.B) * k.H * k.T;
  CudnnAttnScratch s;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at += (bytes + 255) / 256 * 256;
    return here;
  };
  s.q = take(q_elems * 2);
  s.k = take(kv_elems * 2);
  s.v = take(kv_elems * 2);
  s.o = take(q_elems * 2);
  if (!k.backward) {
    s.stats = take(rows * 4);
  } else {
    s.dout = take(q_elems * 2);
    s.dq = take(q_elems * 2);
    s.dk = take(kv_elems * 2);
    s.dv = take(kv_elems * 2);
    s.rowsum = take(rows * 4);
    s.dq_accum = take(q_elems * 4);
  }
  s.total = at;
  return s;
}

}  // namespace clm::cuda
