// cuDNN's fused attention through the backend API (attention_cudnn.h). The graphs are the pattern
// cuDNN's fused flash-attention engines recognise: the scores as a bf16 matmul into fp32, the
// scale, the causal (and sliding-window) mask as index comparisons selecting -inf, the softmax as
// max/sub/exp/sum reductions with the log-sum-exp as a non-virtual output, and a matmul with V.
// The backward recomputes P from the saved log-sum-exp, with rowsum(dO * O) and a dQ accumulator
// in fp32 side buffers the caller provides. With GQA, dK and dV are formed per query head and
// summed over each group by a reduction.
//
// cuDNN's fused backward accumulates dQ across key blocks with atomic adds, so its bits may differ
// between runs; the fp32 and gemm implementations are the deterministic ones.
#ifdef CLOCKLM_HAVE_CUDA
#include "backend/cuda/attention_cudnn.h"

#include <cudnn_graph.h>

#include <cmath>
#include <limits>

#include "backend/cuda/kernels.h"
#include "core/common.h"

namespace clm::cuda {

namespace {

// The handle attributes of the operation graph and the plan: marked deprecated in cuDNN 9 in
// favour of device properties, still honoured, and what ties a plan to our handle.
constexpr int kOpGraphHandle = 800;   // CUDNN_ATTR_OPERATIONGRAPH_HANDLE
constexpr int kPlanHandle = 400;      // CUDNN_ATTR_EXECUTION_PLAN_HANDLE

// The non-virtual tensors' unique ids (the variant pack's keys).
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV, kScale, kNegInf, kWindow, kOne, kRowSum,
  kdQAccum, kFirstVirtual = 100
};

// Descriptors of one graph under construction; every one is kept (the plan's lifetime).
class Graph {
 public:
  explicit Graph(const CudnnApi& a) : a_(a) {}

  void* make(cudnnBackendDescriptorType_t type) {
    void* d = nullptr;
    check(a_.BackendCreateDescriptor(int(type), &d), "create descriptor");
    descs.push_back(d);
    return d;
  }
  void set(void* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t n, const void* v) {
    check(a_.BackendSetAttribute(d, int(name), int(type), n, v), "set attribute");
  }
  void set_desc(void* d, cudnnBackendAttributeName_t name, void* v) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
  }
  void finalize(void* d, const char* what) { check(a_.BackendFinalize(d), what); }

  void* tensor(int64_t uid, cudnnDataType_t dt, const Dims4& t, bool is_virtual,
               bool by_value = false) {
    void* d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dim.data());
    set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.stride.data());
    set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(d, "tensor");
    return d;
  }
  void* io(int64_t uid, cudnnDataType_t dt, const Dims4& t) { return tensor(uid, dt, t, false); }
  void* virt(cudnnDataType_t dt, const Dims4& t) { return tensor(next_++, dt, t, true); }
  // A scalar passed by value in the variant pack (a host pointer to it).
  void* scalar(int64_t uid, cudnnDataType_t dt) {
    return tensor(uid, dt, packed(1, 1, 1, 1), false, true);
  }

  // y = mode(x[, b]) (t: binary select's condition); prec is the compute type; axis for
  // GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, void* x, void* b, void* y, void* t = nullptr,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    void* pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw, "pointwise");
    void* op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    if (t) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    add_op(op, "pointwise op");
  }
  // c = a b over the last two axes, batched over the first two (a head count dividing c's is
  // broadcast: GQA), fp32 accumulation.
  void matmul(void* a, void* b, void* c) {
    void* mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(mm, "matmul");
    void* op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    add_op(op, "matmul op");
  }
  // y = x reduced over the axes where y has extent 1.
  void reduce(cudnnReduceTensorOp_t how, void* x, void* y) {
    void* r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(r, "reduction");
    void* op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    add_op(op, "reduction op");
  }
  // y = x seen with other dims and strides (a transpose).
  void reshape(void* x, void* y) {
    void* op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add_op(op, "reshape op");
  }

  void* operation_graph(void* handle) {
    void* g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, cudnnBackendAttributeName_t(kOpGraphHandle), CUDNN_TYPE_HANDLE, 1, &handle);
    set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()),
        ops_.data());
    finalize(g, "operation graph");
    return g;
  }

  void check(int status, const char* what) const {
    if (status == CUDNN_STATUS_SUCCESS) return;
    char last[512] = {0};
    a_.GetLastErrorString(last, sizeof last);
    fail("cudnn: {}: {}{}{}", what, a_.GetErrorString(status), *last ? ": " : "", last);
  }

  std::vector<void*> descs;
  const std::vector<void*>& ops() const { return ops_; }

 private:
  void add_op(void* op, const char* what) {
    finalize(op, what);
    ops_.push_back(op);
  }
  const CudnnApi& a_;
  std::vector<void*> ops_;
  int64_t next_ = kFirstVirtual;
};

// s with the invisible keys set to -inf: key (column) c is visible from query (row) r when
// c <= r and, with a window, c + window > r.
void* masked(Graph& g, const CudnnAttnKey& k, void* s) {
  const Dims4 sd = score_dims(k);
  void* row = g.virt(CUDNN_DATA_INT32, sd);
  void* col = g.virt(CUDNN_DATA_INT32, sd);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, nullptr, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, nullptr, CUDNN_DATA_FLOAT, 3);
  void* neg_inf = g.scalar(kNegInf, CUDNN_DATA_FLOAT);
  void* causal = g.virt(CUDNN_DATA_BOOLEAN, sd);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, causal, nullptr, CUDNN_DATA_BOOLEAN);
  void* out = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, out, causal);
  if (k.window <= 0) return out;
  void* window = g.scalar(kWindow, CUDNN_DATA_FLOAT);
  void* shifted = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_ADD, col, window, shifted);
  void* recent = g.virt(CUDNN_DATA_BOOLEAN, sd);
  g.pointwise(CUDNN_POINTWISE_CMP_GT, shifted, row, recent, nullptr, CUDNN_DATA_BOOLEAN);
  void* out2 = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, out, neg_inf, out2, recent);
  return out2;
}

// The scaled, masked scores S = mask(scale Q K^T) [B, H, T, T] in fp32.
void* scores(Graph& g, const CudnnAttnKey& k, void* q, void* kt) {
  void* s = g.virt(CUDNN_DATA_FLOAT, score_dims(k));
  g.matmul(q, kt, s);
  void* scaled = g.virt(CUDNN_DATA_FLOAT, score_dims(k));
  g.pointwise(CUDNN_POINTWISE_MUL, s, g.scalar(kScale, CUDNN_DATA_FLOAT), scaled);
  return masked(g, k, scaled);
}

void build_forward(Graph& g, const CudnnAttnKey& k) {
  const Dims4 sd = score_dims(k), rd = row_dims(k);
  void* q = g.io(kQ, CUDNN_DATA_BFLOAT16, q_dims(k));
  void* kt = g.io(kK, CUDNN_DATA_BFLOAT16, transposed_last2(kv_dims(k)));
  void* v = g.io(kV, CUDNN_DATA_BFLOAT16, kv_dims(k));
  void* s = scores(g, k, q, kt);
  void* mx = g.virt(CUDNN_DATA_FLOAT, rd);
  g.reduce(CUDNN_REDUCE_TENSOR_MAX, s, mx);
  void* centred = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_SUB, s, mx, centred);
  void* e = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, nullptr, e);
  void* sum = g.virt(CUDNN_DATA_FLOAT, rd);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  void* log_sum = g.virt(CUDNN_DATA_FLOAT, rd);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, log_sum, g.io(kStats, CUDNN_DATA_FLOAT, rd));
  void* p = g.virt(CUDNN_DATA_BFLOAT16, sd);
  g.pointwise(CUDNN_POINTWISE_DIV, e, sum, p);
  g.matmul(p, v, g.io(kO, CUDNN_DATA_BFLOAT16, q_dims(k)));
}

// out (uid) = a b, summed over each group of H / Hkv query heads when out has Hkv heads (the
// per-head products in bf16, the form cuDNN's fused backward takes for GQA).
void matmul_grouped(Graph& g, const CudnnAttnKey& k, void* a, void* b, int64_t uid) {
  if (k.H == k.Hkv) {
    g.matmul(a, b, g.io(uid, CUDNN_DATA_BFLOAT16, kv_dims(k)));
    return;
  }
  void* full = g.virt(CUDNN_DATA_BFLOAT16, q_dims(k));
  g.matmul(a, b, full);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, full, g.io(uid, CUDNN_DATA_BFLOAT16, kv_dims(k)));
}

void build_backward(Graph& g, const CudnnAttnKey& k) {
  const Dims4 sd = score_dims(k), rd = row_dims(k), qd = q_dims(k);
  void* q = g.io(kQ, CUDNN_DATA_BFLOAT16, qd);
  void* kt = g.io(kK, CUDNN_DATA_BFLOAT16, transposed_last2(kv_dims(k)));
  void* vt = g.io(kV, CUDNN_DATA_BFLOAT16, transposed_last2(kv_dims(k)));
  void* o = g.io(kO, CUDNN_DATA_BFLOAT16, qd);
  void* dout = g.io(kdO, CUDNN_DATA_BFLOAT16, qd);
  void* stats = g.io(kStats, CUDNN_DATA_FLOAT, rd);
  void* scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
  // D = rowsum(dO * O), into its side buffer.
  void* prod = g.virt(CUDNN_DATA_FLOAT, qd);
  g.pointwise(CUDNN_POINTWISE_MUL, dout, o, prod);
  void* dsum = g.virt(CUDNN_DATA_FLOAT, rd);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, prod, dsum);
  void* rowsum = g.io(kRowSum, CUDNN_DATA_FLOAT, rd);
  g.pointwise(CUDNN_POINTWISE_MUL, dsum, g.scalar(kOne, CUDNN_DATA_FLOAT), rowsum);
  // P = exp(S - lse), recomputed; dV = P^T dO.
  void* s = g.virt(CUDNN_DATA_FLOAT, sd);
  g.matmul(q, kt, s);
  void* scaled = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_MUL, s, scale, scaled);
  void* centred = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, stats, centred);
  void* p = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_EXP, masked(g, k, centred), nullptr, p);
  void* pt = g.virt(CUDNN_DATA_BFLOAT16, transposed_last2(sd));
  g.reshape(p, pt);
  matmul_grouped(g, k, pt, dout, kdV);
  // dS = P (dO V^T - D) scale; dK = dS^T Q; dQ = dS K.
  void* dp = g.virt(CUDNN_DATA_FLOAT, sd);
  g.matmul(dout, vt, dp);
  void* diff = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, rowsum, diff);
  void* dsp = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_MUL, diff, p, dsp);
  void* ds = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_MUL, dsp, scale, ds);
  void* dst = g.virt(CUDNN_DATA_BFLOAT16, transposed_last2(sd));
  g.reshape(ds, dst);
  matmul_grouped(g, k, dst, q, kdK);
  void* kk = g.virt(CUDNN_DATA_BFLOAT16, kv_dims(k));
  g.reshape(kt, kk);
  void* accum = g.io(kdQAccum, CUDNN_DATA_FLOAT, qd);
  g.matmul(ds, kk, accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, accum, nullptr, g.io(kdQ, CUDNN_DATA_BFLOAT16, qd));
}

void build_graph_ops(Graph& g, const CudnnAttnKey& k) {
  k.backward ? build_backward(g, k) : build_forward(g, k);
}

}  // namespace

CudnnAttnOps build_attention_ops(const CudnnApi& api, const CudnnAttnKey& key) {
  Graph g(api);
  try {
    build_graph_ops(g, key);
  } catch (...) {
    destroy_descriptors(api, g.descs);
    throw;
  }
  return {.descs = g.descs, .ops = g.ops()};
}

void destroy_descriptors(const CudnnApi& api, std::vector<void*>& descs) {
  for (auto it = descs.rbegin(); it != descs.rend(); ++it) api.BackendDestroyDescriptor(*it);
  descs.clear();
}

CudnnAttention::CudnnAttention(const CudnnApi& api, cudaStream_t st) : api_(api), st_(st) {
  load_cudnn_engines(cudnn_library());
  Graph g(api_);
  g.check(api_.Create(&handle_), "cudnnCreate");
  g.check(api_.SetStream(handle_, st_), "cudnnSetStream");
}

CudnnAttention::~CudnnAttention() {
  for (auto& [key, p] : plans_) {
    destroy_descriptors(api_, p.descs);
    if (p.workspace) cudaFree(p.workspace);
  }
  if (handle_) api_.Destroy(handle_);
}

// The graph, cuDNN's heuristic list of engine configurations for it (mode A), and the first
// configuration whose plan finalizes; then its workspace, allocated once.
CudnnAttention::Plan CudnnAttention::build(const CudnnAttnKey& key) {
  Plan p;
  Graph g(api_);
  try {
    build_graph_ops(g, key);
    void* graph = g.operation_graph(handle_);
    void* heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    g.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    g.finalize(heur, "engine heuristics");
    std::vector<void*> cfgs(16);
    for (void*& c : cfgs) c = g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t n = 0;
    g.check(api_.BackendGetAttribute(heur, int(CUDNN_ATTR_ENGINEHEUR_RESULTS),
                                     int(CUDNN_TYPE_BACKEND_DESCRIPTOR), int64_t(cfgs.size()),
                                     &n, cfgs.data()),
            "engine heuristics results");
    std::string last = "no engine configuration offered";
    for (int64_t i = 0; i < n && !p.plan; ++i) {
      void* plan = g.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      g.set(plan, cudnnBackendAttributeName_t(kPlanHandle), CUDNN_TYPE_HANDLE, 1, &handle_);
      g.set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[size_t(i)]);
      const int st = api_.BackendFinalize(plan);
      if (st == CUDNN_STATUS_SUCCESS) p.plan = plan;
      else last = api_.GetErrorString(st);
    }
    if (!p.plan) fail("cudnn: no plan for {} engine configurations: {}", n, last);
    int64_t got = 0;
    g.check(api_.BackendGetAttribute(p.plan, int(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE),
                                     int(CUDNN_TYPE_INT64), 1, &got, &p.workspace_bytes),
            "workspace size");
    const size_t ws = size_t(p.workspace_bytes);
    if (ws > 0 && cudaMalloc(&p.workspace, ws) != cudaSuccess) {
      cudaGetLastError();
      fail("cudnn: cudaMalloc of a {} byte workspace failed", p.workspace_bytes);
    }
  } catch (const Error& e) {
    p.plan = nullptr;
    p.error = e.what();
  }
  p.descs = std::move(g.descs);
  return p;
}

const CudnnAttention::Plan& CudnnAttention::plan_of(const CudnnAttnKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, build(key)).first;
  return it->second;
}

std::string CudnnAttention::prepare(const CudnnAttnKey& key) { return plan_of(key).error; }

void CudnnAttention::execute(const Plan& p, const std::vector<int64_t>& uids,
                             const std::vector<void*>& ptrs) {
  Graph g(api_);
  void* pack = nullptr;
  g.check(api_.BackendCreateDescriptor(int(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR), &pack),
          "variant pack");
  struct Destroy {
    const CudnnApi& a;
    void* d;
    ~Destroy() { a.BackendDestroyDescriptor(d); }
  } destroy{api_, pack};
  void* ws = p.workspace;
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()),
        uids.data());
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()),
        ptrs.data());
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  g.finalize(pack, "variant pack");
  g.check(api_.BackendExecute(handle_, p.plan, pack), "execute");
}

void CudnnAttention::forward(const CudnnAttnKey& k, const CudnnAttnFwdIo& io, void* scratch) {
  const Plan& p = plan_of(k);
  if (!p.plan) fail("cudnn attention: {}", p.error);
  const CudnnAttnScratch s = cudnn_attention_scratch(k);
  char* base = static_cast<char*>(scratch);
  auto* q16 = reinterpret_cast<uint16_t*>(base + s.q);
  auto* k16 = reinterpret_cast<uint16_t*>(base + s.k);
  auto* v16 = reinterpret_cast<uint16_t*>(base + s.v);
  auto* o16 = reinterpret_cast<uint16_t*>(base + s.o);
  float* stats = io.lse ? io.lse : reinterpret_cast<float*>(base + s.stats);
  rows_to_bf16(st_, io.q, q16, int64_t(k.B) * k.H, k.T, k.T, k.hd);
  rows_to_bf16(st_, io.k, k16, int64_t(k.B) * k.Hkv, k.T, io.Tk_cap, k.hd);
  rows_to_bf16(st_, io.v, v16, int64_t(k.B) * k.Hkv, k.T, io.Tk_cap, k.hd);
  float scale = 1.0f / std::sqrt(float(k.hd)), neg_inf = -std::numeric_limits<float>::infinity();
  float window = float(k.window);
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale, kNegInf};
  std::vector<void*> ptrs = {q16, k16, v16, o16, stats, &scale, &neg_inf};
  if (k.window > 0) {
    uids.push_back(kWindow);
    ptrs.push_back(&window);
  }
  execute(p, uids, ptrs);
  bf16_to_f32(st_, o16, io.o, int64_t(k.B) * k.H * k.T * k.hd);
}

void CudnnAttention::backward(const CudnnAttnKey& k, const CudnnAttnBwdIo& io, void* scratch) {
  const Plan& p = plan_of(k);
  if (!p.plan) fail("cudnn attention: {}", p.error);
  const CudnnAttnScratch s = cudnn_attention_scratch(k);
  char* base = static_cast<char*>(scratch);
  auto at16 = [base](size_t off) { return reinterpret_cast<uint16_t*>(base + off); };
  const int64_t qh = int64_t(k.B) * k.H, kvh = int64_t(k.B) * k.Hkv;
  rows_to_bf16(st_, io.q, at16(s.q), qh, k.T, k.T, k.hd);
  rows_to_bf16(st_, io.k, at16(s.k), kvh, k.T, k.T, k.hd);
  rows_to_bf16(st_, io.v, at16(s.v), kvh, k.T, k.T, k.hd);
  rows_to_bf16(st_, io.o, at16(s.o), qh, k.T, k.T, k.hd);
  rows_to_bf16(st_, io.dout, at16(s.dout), qh, k.T, k.T, k.hd);
  float scale = 1.0f / std::sqrt(float(k.hd)), neg_inf = -std::numeric_limits<float>::infinity();
  float window = float(k.window), one = 1.0f;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kdO, kStats, kdQ, kdK, kdV,
                               kScale, kNegInf, kOne, kRowSum, kdQAccum};
  std::vector<void*> ptrs = {at16(s.q), at16(s.k), at16(s.v), at16(s.o), at16(s.dout),
                             const_cast<float*>(io.lse), at16(s.dq), at16(s.dk), at16(s.dv),
                             &scale, &neg_inf, &one, base + s.rowsum, base + s.dq_accum};
  if (k.window > 0) {
    uids.push_back(kWindow);
    ptrs.push_back(&window);
  }
  execute(p, uids, ptrs);
  bf16_to_f32(st_, at16(s.dq), io.dq, qh * k.T * k.hd);
  bf16_to_f32(st_, at16(s.dk), io.dk, kvh * k.T * k.hd);
  bf16_to_f32(st_, at16(s.dv), io.dv, kvh * k.T * k.hd);
}

}  // namespace clm::cuda

#endif  // CLOCKLM_HAVE_CUDA
