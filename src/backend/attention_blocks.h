// The block plan of the GEMM attention (backend/cuda/attention_gemm.cu) and the visibility rule
// it masks with, as plain C++ that host code, the CPU tests and the CUDA kernels share.
//
// Queries are split into blocks of `block_rows` rows. Query row i of a call sits at absolute
// position p = (Tk - Tq) + i and sees keys max(0, p - window + 1)..p (window <= 0: 0..p). A block
// multiplies only the contiguous key range its rows can see together: from its first row's first
// key to its last row's position. Keys in that range that a row cannot see are masked (probability
// 0) by attention_visible; every visible (query, key) pair lies in exactly one block's range.
//
// Buffers of one block are [B*H, nq, ld] with ld = nk rounded up to a multiple of 8 (aligned
// rows for the tensor-core GEMMs); the workspace layouts below size them from the plan's largest
// block.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define CLM_HD __host__ __device__
#else
#define CLM_HD
#endif

namespace clm {

// The first key a query at absolute position p sees.
CLM_HD inline int attention_first_key(int p, int window) {
  return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}
// Whether the query at absolute position p sees key j.
CLM_HD inline bool attention_visible(int p, int j, int window) {
  return j <= p && j >= attention_first_key(p, window);
}

// One query block: rows [q0, q0 + nq) of the call, keys [k0, k0 + nk), buffer row stride ld.
struct AttnBlock {
  int q0 = 0, nq = 0, k0 = 0, nk = 0, ld = 0;
};

struct AttnPlan {
  int Tq = 0, Tk = 0, window = 0, block_rows = 0;
  std::vector<AttnBlock> blocks;
  int64_t max_tile = 0;  // largest nq * ld over the blocks: elements per (batch, head) of a tile
};

// The plan of Tq queries at positions Tk - Tq.. over Tk keys (0 <= Tq <= Tk), block_rows >= 1.
AttnPlan attention_plan(int Tq, int Tk, int window, int block_rows);

// Byte offsets of the forward's workspace: q, k, v rounded to bf16 with k and v expanded from Hkv
// to H heads ([B*H, Tq or Tk, hd]), a block's scores S (fp32) and probabilities P (bf16).
struct AttnFwdLayout {
  size_t q = 0, k = 0, v = 0, s = 0, p = 0, bytes = 0;
};
AttnFwdLayout attention_fwd_layout(const AttnPlan& plan, int BH, int hd);

// The backward's workspace (Tq == Tk == T): q, k, v, dO in bf16 ([B*H, T, hd]), the row terms
// D = rowsum(dO * O) (fp32 [B*H*T]), a block's S and dP (fp32), P and dS (bf16), and, when
// `expand_grads` (GQA: Hkv < H), dK and dV per query head (fp32 [B*H, T, hd]) before the group sum.
struct AttnBwdLayout {
  size_t q = 0, k = 0, v = 0, dout = 0, rows = 0, s = 0, dp = 0, p = 0, ds = 0, dk = 0, dv = 0,
         bytes = 0;
};
AttnBwdLayout attention_bwd_layout(const AttnPlan& plan, int BH, int hd, bool expand_grads);

// The query block size the GEMM attention uses for a shape (the plan's block_rows).
int attention_block_rows(int Tq);

}  // namespace clm
