// Newton-Schulz over many matrices, grouped by the shape the iteration works on, so that a backend
// can run each group as one stack of same-shape matrices (strided-batched matmuls) instead of one
// matrix at a time. Plain C++ shared by the backends and tested on the CPU.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/dtype.h"

#ifndef CLM_HD
#if defined(__CUDACC__)
#define CLM_HD __host__ __device__
#else
#define CLM_HD
#endif
#endif

namespace clm {

// The iteration works on the short side: a tall matrix (rows > cols) is iterated as its transpose,
// so X is a x b with a = min(rows, cols) <= b = max(rows, cols).
inline bool ns_transposed(int64_t rows, int64_t cols) { return rows > cols; }

// Whether the iteration rounds its matmul inputs to bf16 for an a x b X: with bf16 precision, from
// a^2 b above 128*128*256 multiply-adds per X X^T; smaller matrices run in fp32 whatever the
// precision (per-call overhead dominates them and fp32 costs nothing more).
inline bool ns_uses_bf16(MatPrec prec, int64_t a, int64_t b) {
  constexpr int64_t kSmallNs = int64_t(128) * 128 * 256;
  return prec == MatPrec::BF16 && a * a * b > kSmallNs;
}

// Where element e (row-major) of a member's a x b X comes from in its G: G itself, or for a tall
// member (G is b x a) X = G^T.
CLM_HD inline int64_t ns_load_index(int64_t e, int64_t a, int64_t b, bool tr) {
  if (!tr) return e;
  const int64_t i = e / b, j = e - i * b;  // X[i][j] = G[j][i]
  return j * a + i;
}
// Where element o (row-major) of a member's out comes from in its X: the inverse of ns_load_index.
CLM_HD inline int64_t ns_store_index(int64_t o, int64_t a, int64_t b, bool tr) {
  if (!tr) return o;
  const int64_t j = o / a, i = o - j * a;  // out[j][i] = X[i][j]
  return i * b + j;
}

// One stack: every member iterates on an a x b X. members are indices into the op's matrices in
// their order; transposed[k] says whether members[k] is stored b x a (tall) rather than a x b.
struct NsGroup {
  int64_t a = 0, b = 0;
  std::vector<int> members;
  std::vector<bool> transposed;
  int count() const { return int(members.size()); }
  int64_t floats() const { return int64_t(members.size()) * a * b; }  // the stack's X
};

// The matrices (rows[i] x cols[i], i < count) grouped by (short side, long side); groups in the
// order of their first member, members in index order. A matrix and its transpose share a group.
std::vector<NsGroup> ns_groups(const int64_t* rows, const int64_t* cols, int count);

}  // namespace clm
