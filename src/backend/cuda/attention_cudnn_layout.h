// The cuDNN attention's shapes without cuDNN: which cases it serves, the 4-d dims and strides of
// each tensor of its operation graphs, and the layout of its scratch (bf16 copies of the fp32
// operands, cuDNN's fp32 side buffers). Plain C++, so the arithmetic is tested on any machine;
// attention_cudnn.cpp builds the descriptors from it.
//
// The op's operands are fp32 (backend/op_args.h): q, o, dO, dq [B, H, T, hd]; k, v [B, Hkv,
// Tk_cap, hd] of which the first Tk rows count; dk, dv [B, Hkv, T, hd]; lse [B, H, Tq]. cuDNN's
// fused attention takes bf16, so q, k, v (and o, dO) are rounded to bf16 into the scratch, k and v
// compacted to their T rows, in one vectorised kernel per tensor; o, dq, dk, dv come back from
// bf16 the same way. The log-sum-exp is fp32 [B, H, T, 1] in cuDNN's graph: the op's lse itself.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>

#include "backend/cuda/attention_select.h"

namespace clm::cuda {

// What one cuDNN plan is built for: forward or backward of B x H query heads over Hkv key/value
// heads, T queries and keys, head dim hd, window (0: causal only).
struct CudnnAttnKey {
  bool backward = false;
  int B = 0, H = 0, Hkv = 0, T = 0, hd = 0, window = 0;
  auto tie() const { return std::make_tuple(backward, B, H, Hkv, T, hd, window); }
  bool operator<(const CudnnAttnKey& o) const { return tie() < o.tie(); }
};

// Empty when cuDNN's fused attention serves the shape, else why not (one phrase): head dims 64
// and 128, H a multiple of Hkv, queries and keys the same T (training and whole-sequence
// evaluation; a KV-cache call with fewer queries than keys goes to the other implementations).
std::string cudnn_attention_unsupported(const AttnShape& s);
CudnnAttnKey cudnn_attention_key(const AttnShape& s);  // for a supported shape

// A tensor's dims and strides, in elements, outermost first (cuDNN's order).
struct Dims4 {
  std::array<int64_t, 4> dim{}, stride{};
};
Dims4 packed(int64_t a, int64_t b, int64_t c, int64_t d);  // row-major strides
Dims4 transposed_last2(const Dims4& t);  // the same memory seen with the last two axes swapped

// The graph tensors of a key (bf16 unless said): Q, O, dO, dQ [B, H, T, hd]; K, V, dK, dV [B, Hkv,
// T, hd]; the scores [B, H, T, T] (fp32, virtual); the row statistics [B, H, T, 1] (fp32).
Dims4 q_dims(const CudnnAttnKey& k);
Dims4 kv_dims(const CudnnAttnKey& k);
Dims4 score_dims(const CudnnAttnKey& k);
Dims4 row_dims(const CudnnAttnKey& k);

// Byte offsets into the op's scratch, each 256-byte aligned; `total` is the size to borrow. The
// forward uses q, k, v, o (and stats when the caller wants no lse); the backward all but stats.
struct CudnnAttnScratch {
  size_t q = 0, k = 0, v = 0, o = 0, dout = 0, dq = 0, dk = 0, dv = 0;
  size_t stats = 0;     // fp32 [B, H, T]: the forward's statistics when lse is null
  size_t rowsum = 0;    // fp32 [B, H, T]: the backward's rowsum(dO * O), a cuDNN side buffer
  size_t dq_accum = 0;  // fp32 [B, H, T, hd]: the backward's dQ accumulator, a cuDNN side buffer
  size_t total = 0;
};
CudnnAttnScratch cudnn_attention_scratch(const CudnnAttnKey& k);

}  // namespace clm::cuda
