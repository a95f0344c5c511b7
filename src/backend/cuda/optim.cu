// CUDA kernels of the optimizer and the conversions, each the formula of its CPU reference
// (backend/cpu/optim_kernels.cpp, convert.cpp, newton_schulz.cpp) in the same association. The sum
// of squares is deterministic: fixed 16K-element chunks (as on the CPU) summed in double per
// block, then one block adds the chunk sums in a fixed tree.
#include <algorithm>
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/ns_groups.h"

namespace clm::cuda {

namespace {

constexpr int64_t kSsChunk = 16384;

// One chunk's sum of squares (block blockIdx.x of a sum over x[0, n)), and the total of `chunks`
// chunk sums in one block: the same order wherever they run, so a matrix's sum has the same bits
// alone (sum_squares) and in a stack (ns_stack_load).
__device__ double ss_chunk(const float* x, int64_t n, double* sh) {
  const int64_t lo = int64_t(blockIdx.x) * kSsChunk;
  const int64_t hi = lo + kSsChunk < n ? lo + kSsChunk : n;
  double acc = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) acc += double(x[i]) * double(x[i]);
  return block_sum(acc, sh);
}

__device__ double ss_total(const double* part, int64_t chunks, double* sh) {
  double acc = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) acc += part[c];
  return block_sum(acc, sh);
}

__global__ void ss_chunks_k(const float* x, int64_t n, double* part) {
  __shared__ double sh[32];
  const double acc = ss_chunk(x, n, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void ss_total_k(const double* part, int64_t chunks, double* out) {
  __shared__ double sh[32];
  const double acc = ss_total(part, chunks, sh);
  if (threadIdx.x == 0) *out = acc;
}

// The stack's sums: block (chunk, matrix blockIdx.y) over member blockIdx.y's G, then one block per
// matrix adding its chunks.
__global__ void ns_ss_chunks_k(const NsMember* m, int64_t n, int64_t chunks, double* part) {
  __shared__ double sh[32];
  const double acc = ss_chunk(m[blockIdx.y].G, n, sh);
  if (threadIdx.x == 0) part[int64_t(blockIdx.y) * chunks + blockIdx.x] = acc;
}

__global__ void ns_ss_total_k(const double* part, int64_t chunks, double* out) {
  __shared__ double sh[32];
  const double acc = ss_total(part + int64_t(blockIdx.x) * chunks, chunks, sh);
  if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

// The clip from the per-parameter sums: one thread, the sums added in order (the CPU's order), so
// norm and gscale are the CPU kernel's bits.
__global__ void grad_clip_k(GradClipArgs a) {
  double ss = 0;
  for (int i = 0; i < a.count; ++i) ss += a.part[i];
  const float norm = float(sqrt(ss));
  bool finite = isfinite(norm);
  for (int i = 0; i < a.n_checks; ++i) finite = finite && isfinite(a.checks[i]);
  a.out->norm = norm;
  a.out->gscale = a.max_norm > 0 && norm > a.max_norm ? a.max_norm / (norm + 1e-6f) : 1.0f;
  a.out->finite = finite ? 1 : 0;
}

// The step's scalars are read from device memory (GradClip, GroupStep), so a recorded launch
// replays with whatever the host or grad_clip wrote there; bias corrections as the CPU forms them.
__global__ void adamw_k(float* p, const float* grad, float* m, float* v, int64_t n,
                        const GradClip* clip, const GroupStep* gs, float beta1, float beta2,
                        float eps, bool cautious) {
  if (!clip->finite) return;
  const float gscale = clip->gscale, lr = gs->lr;
  const float bc1 = 1.0f - float(pow(double(beta1), double(gs->t)));
  const float bc2 = 1.0f - float(pow(double(beta2), double(gs->t)));
  const float step = lr / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2), decay = 1.0f - lr * gs->wd;
  CLM_GRID_STRIDE(i, n) {
    const float g = grad[i] * gscale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i], d = cautious && !(mi * pi > 0.0f) ? 1.0f : decay;
    p[i] = pi * d - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

__global__ void muon_momentum_k(const float* grad, float* buf, float* u, int64_t n,
                                const GradClip* clip, const GroupStep* gs, bool nesterov) {
  if (!clip->finite) return;
  const float gscale = clip->gscale, mu = gs->mu;
  CLM_GRID_STRIDE(i, n) {
    const float g = grad[i] * gscale;
    const float b = mu * buf[i] + g;
    buf[i] = b;
    u[i] = nesterov ? g + mu * b : b;
  }
}

__global__ void muon_apply_k(float* p, const float* o, int64_t n, const GradClip* clip,
                             const GroupStep* gs, float scale, bool cautious) {
  if (!clip->finite) return;
  const float lr = gs->lr, decay = 1.0f - lr * gs->wd, step = lr * scale;
  CLM_GRID_STRIDE(i, n) {
    const float pi = p[i], d = cautious && !(o[i] * pi > 0.0f) ? 1.0f : decay;
    p[i] = pi * d - step * o[i];
  }
}

// One block a row: the row's sum of squares in double (kept for the norm), and v's update.
__global__ void normuon_rows_k(const float* o, float* v, int64_t cols, float beta2, double* ss,
                               const GradClip* clip) {
  __shared__ double sh[32];
  if (!clip->finite) return;  // the whole block alike, before its barriers
  const int64_t r = blockIdx.x;
  const float* x = o + r * cols;
  double acc = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc += double(x[c]) * double(x[c]);
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) {
    ss[r] = acc;
    v[r] = beta2 * v[r] + (1.0f - beta2) * float(acc / double(cols));
  }
}

// One block: the rescale factor f that keeps the Frobenius norm, into ss[rows].
__global__ void normuon_factor_k(double* ss, const float* v, int64_t rows, float eps) {
  __shared__ double sh[32];
  double before = 0, after = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const double d = double(sqrtf(v[r]) + eps);
    before += ss[r];
    after += ss[r] / (d * d);
  }
  before = block_sum(before, sh);
  after = block_sum(after, sh);
  if (threadIdx.x == 0) ss[rows] = after > 0 ? sqrt(before / after) : 1.0;
}

__global__ void normuon_apply_k(float* o, const float* v, int64_t rows, int64_t cols, float eps,
                                const double* f, const GradClip* clip) {
  if (!clip->finite) return;
  const double ff = f[rows];
  CLM_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols;
    o[i] *= float(ff / double(sqrtf(v[r]) + eps));
  }
}

struct Same {  // a conversion is the map of the identity: the load widens, the store rounds
  __device__ float operator()(float v) const { return v; }
};

// X[i][j] (a x b) = (tr ? G[j][i] : G[i][j]) * inv, inv = 1/(sqrt(ss) + 1e-7) as the CPU forms it.
__global__ void ns_load_k(const float* G, float* X, int64_t rows, int64_t cols, bool tr,
                          const double* ss, float margin) {
  const float inv = float(1.0 / (sqrt(*ss) * margin + 1e-7));
  const int64_t b = tr ? rows : cols;
  CLM_GRID_STRIDE(idx, rows * cols) {
    const int64_t i = idx / b, j = idx - i * b;
    X[idx] = (tr ? G[j * cols + i] : G[idx]) * inv;
  }
}

// out (rows x cols) = X, or X^T when X holds the transpose (a = cols, b = rows).
__global__ void ns_store_k(const float* X, float* out, int64_t rows, int64_t cols, bool tr) {
  CLM_GRID_STRIDE(o, rows * cols) {
    if (tr) {
      const int64_t j = o / cols, i = o - j * cols;  // out[j][i] = X[i][j], X is cols x rows
      out[o] = X[i * rows + j];
    } else {
      out[o] = X[o];
    }
  }
}

// The stack X (count matrices of a x b, one after another) from each member's G, as ns_load_k
// does for one: member k's X = G or G^T times 1/(sqrt(ss[k]) * margin + 1e-7).
__global__ void ns_stack_load_k(const NsMember* m, float* X, int count, int64_t a, int64_t b,
                                const double* ss, float margin) {
  const int64_t n = a * b;
  CLM_GRID_STRIDE(idx, int64_t(count) * n) {
    const int64_t k = idx / n, e = idx - k * n;
    const float inv = float(1.0 / (sqrt(ss[k]) * margin + 1e-7));
    X[idx] = m[k].G[ns_load_index(e, a, b, m[k].tr)] * inv;
  }
}

// Each member's out from its X in the stack, as ns_store_k does for one (a tall member's out is
// b x a, its X transposed).
__global__ void ns_stack_store_k(const NsMember* m, const float* X, int count, int64_t a, int64_t b) {
  const int64_t n = a * b;
  CLM_GRID_STRIDE(idx, int64_t(count) * n) {
    const int64_t k = idx / n, o = idx - k * n;
    m[k].out[o] = X[k * n + ns_store_index(o, a, b, m[k].tr)];
  }
}

}  // namespace

size_t sum_squares_scratch(int64_t n) {
  return size_t(std::max<int64_t>((n + kSsChunk - 1) / kSsChunk, 1)) * 8;
}

void sum_squares(cudaStream_t st, const float* x, int64_t n, double* out, void* scratch) {
  const int64_t chunks = (n + kSsChunk - 1) / kSsChunk;
  auto* part = static_cast<double*>(scratch);
  if (chunks > 0) ss_chunks_k<<<unsigned(chunks), kThreads, 0, st>>>(x, n, part);
  ss_total_k<<<1, 1024, 0, st>>>(part, chunks, out);
}

void grad_clip(cudaStream_t st, const GradClipArgs& a) { grad_clip_k<<<1, 1, 0, st>>>(a); }

void adamw_update(cudaStream_t st, const AdamWArgs& a) {
  const AdamWHyper& h = a.hyper;
  if (a.n > 0)
    adamw_k<<<grid_for(a.n), kThreads, 0, st>>>(a.p, a.grad, a.m, a.v, a.n, a.clip, a.step, h.beta1,
                                                h.beta2, h.eps, h.cautious);
}

void muon_momentum(cudaStream_t st, const MuonMomentumArgs& a) {
  if (a.n > 0)
    muon_momentum_k<<<grid_for(a.n), kThreads, 0, st>>>(a.grad, a.buf, a.u, a.n, a.clip, a.step,
                                                        a.nesterov);
}

void muon_apply(cudaStream_t st, const MuonApplyArgs& a) {
  if (a.n > 0)
    muon_apply_k<<<grid_for(a.n), kThreads, 0, st>>>(a.p, a.o, a.n, a.clip, a.step, a.scale,
                                                     a.cautious);
}

size_t normuon_scale_scratch(int64_t rows) { return size_t(std::max<int64_t>(rows, 0) + 1) * 8; }

void normuon_scale(cudaStream_t st, const NormuonScaleArgs& a, void* scratch) {
  const int64_t rows = a.rows, cols = a.cols;
  if (rows <= 0 || cols <= 0) return;
  auto* ss = static_cast<double*>(scratch);
  normuon_rows_k<<<unsigned(rows), kThreads, 0, st>>>(a.o, a.v, cols, a.beta2, ss, a.clip);
  normuon_factor_k<<<1, 1024, 0, st>>>(ss, a.v, rows, a.eps);
  normuon_apply_k<<<grid_for(rows * cols), kThreads, 0, st>>>(a.o, a.v, rows, cols, a.eps, ss, a.clip);
}

void f32_to_bf16(cudaStream_t st, const float* x, bf16_t* y, int64_t n) {
  launch_map(st, Map1<Same, float, uint16_t>{x, y, Same{}}, n);
}

void bf16_to_f32(cudaStream_t st, const bf16_t* x, float* y, int64_t n) {
  launch_map(st, Map1<Same, uint16_t, float>{x, y, Same{}}, n);
}

void ns_load(cudaStream_t st, const float* G, float* X, int64_t rows, int64_t cols, bool tr,
             const double* ss, float margin) {
  if (rows * cols > 0)
    ns_load_k<<<grid_for(rows * cols), kThreads, 0, st>>>(G, X, rows, cols, tr, ss, margin);
}

void ns_store(cudaStream_t st, const float* X, float* out, int64_t rows, int64_t cols, bool tr) {
  if (rows * cols > 0)
    ns_store_k<<<grid_for(rows * cols), kThreads, 0, st>>>(X, out, rows, cols, tr);
}

size_t ns_stack_scratch(int count, int64_t n) {
  return size_t(std::max(count, 1)) * size_t(std::max<int64_t>((n + kSsChunk - 1) / kSsChunk, 1) + 1) * 8;
}

void ns_stack_load(cudaStream_t st, const NsMember* m, float* X, int count, int64_t a, int64_t b,
                   float margin, void* scratch) {
  const int64_t n = a * b;
  if (count <= 0 || n <= 0) return;
  const int64_t chunks = (n + kSsChunk - 1) / kSsChunk;
  auto* ss = static_cast<double*>(scratch);
  double* part = ss + count;
  ns_ss_chunks_k<<<dim3(unsigned(chunks), unsigned(count)), kThreads, 0, st>>>(m, n, chunks, part);
  ns_ss_total_k<<<unsigned(count), 1024, 0, st>>>(part, chunks, ss);
  ns_stack_load_k<<<grid_for(int64_t(count) * n), kThreads, 0, st>>>(m, X, count, a, b, ss, margin);
}

void ns_stack_store(cudaStream_t st, const NsMember* m, const float* X, int count, int64_t a, int64_t b) {
  if (count > 0 && a * b > 0)
    ns_stack_store_k<<<grid_for(int64_t(count) * a * b), kThreads, 0, st>>>(m, X, count, a, b);
}

}  // namespace clm::cuda
