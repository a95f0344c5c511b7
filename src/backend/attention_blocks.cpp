// The GEMM attention's block plan and workspace layouts (attention_blocks.h).
#include "backend/attention_blocks.h"

#include <algorithm>

#include "core/common.h"

namespace clm {

namespace {

constexpr size_t kAlign = 256;  // every workspace region starts on a 256-byte boundary

// Reserves `bytes` at the end of a layout of `*end` bytes and returns its offset.
size_t take(size_t* end, size_t bytes) {
  const size_t at = (*end + kAlign - 1) / kAlign * kAlign;
  *end = at + bytes;
  return at;
}

}  // namespace

AttnPlan attention_plan(int Tq, int Tk, int window, int block_rows) {
  if (Tq < 0 || Tk < Tq || block_rows < 1)
    fail("attention plan: need 0 <= Tq <= Tk and block_rows >= 1 (Tq {}, Tk {}, block_rows {})", Tq,
         Tk, block_rows);
  AttnPlan plan;
  plan.Tq = Tq;
  plan.Tk = Tk;
  plan.window = window;
  plan.block_rows = block_rows;
  const int off = Tk - Tq;
  for (int q0 = 0; q0 < Tq; q0 += block_rows) {
    AttnBlock b;
    b.q0 = q0;
    b.nq = std::min(block_rows, Tq - q0);
    b.k0 = attention_first_key(off + q0, window);
    b.nk = off + q0 + b.nq - b.k0;  // through the last row's own position
    b.ld = (b.nk + 7) / 8 * 8;
    plan.max_tile = std::max(plan.max_tile, int64_t(b.nq) * b.ld);
    plan.blocks.push_back(b);
  }
  return plan;
}

AttnFwdLayout attention_fwd_layout(const AttnPlan& plan, int BH, int hd) {
  AttnFwdLayout l;
  size_t end = 0;
  l.q = take(&end, size_t(BH) * plan.Tq * hd * 2);
  l.k = take(&end, size_t(BH) * plan.Tk * hd * 2);
  l.v = take(&end, size_t(BH) * plan.Tk * hd * 2);
  const size_t tile = size_t(BH) * size_t(plan.max_tile);
  l.s = take(&end, tile * 4);
  l.p = take(&end, tile * 2);
  l.bytes = end;
  return l;
}

AttnBwdLayout attention_bwd_layout(const AttnPlan& plan, int BH, int hd, bool expand_grads) {
  AttnBwdLayout l;
  size_t end = 0;
  const size_t heads = size_t(BH) * plan.Tk * hd;
  l.q = take(&end, heads * 2);
  l.k = take(&end, heads * 2);
  l.v = take(&end, heads * 2);
  l.dout = take(&end, heads * 2);
  l.rows = take(&end, size_t(BH) * plan.Tk * 4);
  const size_t tile = size_t(BH) * size_t(plan.max_tile);
  l.s = take(&end, tile * 4);
  l.dp = take(&end, tile * 4);
  l.p = take(&end, tile * 2);
  l.ds = take(&end, tile * 2);
  if (expand_grads) {
    l.dk = take(&end, heads * 4);
    l.dv = take(&end, heads * 4);
  }
  l.bytes = end;
  return l;
}

int attention_block_rows(int Tq) {
  // 128 rows: batched GEMMs of 128 x keys x hd keep the tensor cores busy, and the causal waste
  // (the masked half of each block's last 128 x 128 square) stays under 1/16 of the work at 1024+.
  return Tq <= 128 ? std::max(Tq, 1) : 128;
}

}  // namespace clm
