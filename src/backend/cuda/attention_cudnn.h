// Attention through cuDNN's fused flash attention (the backend API's operation graphs), for the
// CUDA backend: per shape key an execution plan built once (with its workspace, allocated once)
// and kept, then each call rounds the fp32 operands to bf16 into the op's scratch, runs the plan
// and widens the bf16 results back (attention_cudnn_layout.h has the shapes and the scratch).
// cuDNN is the dlopen'ed library of cudnn_loader.h. Plain C++ declarations (the host compiler
// builds cuda_backend.cpp); the operand conversion is in attention_cudnn_convert.cu, the way
// back is the backend's bf16_to_f32 (kernels.h).
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/attention_cudnn_layout.h"
#include "backend/cuda/cudnn_loader.h"

namespace clm::cuda {

// y[(h * T + t) * hd + d] = bf16(x[(h * Tcap + t) * hd + d]) for `heads` heads of T rows (of Tcap).
void rows_to_bf16(cudaStream_t st, const float* x, uint16_t* y, int64_t heads, int T, int Tcap,
                  int hd);

// The operands of one call, as the op passes them (fp32, the layouts of op_args.h).
struct CudnnAttnFwdIo {
  const float *q, *k, *v;
  float *o, *lse;  // lse may be null
  int Tk_cap;
};
struct CudnnAttnBwdIo {
  const float *q, *k, *v, *o, *lse, *dout;
  float *dq, *dk, *dv;
};

// The operations of a key's graph, every descriptor built and finalized; this needs no handle
// and no GPU (only the operation graph and the plan do), so the tests check it anywhere cuDNN
// loads. The caller owns `descs` (destroy_descriptors); a refusal is an Error naming the step.
struct CudnnAttnOps {
  std::vector<void*> descs;  // every descriptor, in creation order
  std::vector<void*> ops;    // the operations, in graph order
};
CudnnAttnOps build_attention_ops(const CudnnApi& api, const CudnnAttnKey& key);
void destroy_descriptors(const CudnnApi& api, std::vector<void*>& descs);

class CudnnAttention {
 public:
  // Needs a loaded cuDNN (cudnn_library().api) and the current device set; `st` is the stream
  // every plan runs on.
  CudnnAttention(const CudnnApi& api, cudaStream_t st);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds the key's plan the first time (and its workspace); empty when it is ready, else why
  // cuDNN offers none (the same answer on every later call, without trying again).
  std::string prepare(const CudnnAttnKey& key);
  // Enqueue one call of a prepared key; `scratch` holds cudnn_attention_scratch(key).total bytes.
  void forward(const CudnnAttnKey& key, const CudnnAttnFwdIo& io, void* scratch);
  void backward(const CudnnAttnKey& key, const CudnnAttnBwdIo& io, void* scratch);

 private:
  struct Plan {
    void* plan = nullptr;
    std::vector<void*> descs;  // every descriptor the plan was built from, kept for its lifetime
    void* workspace = nullptr;
    int64_t workspace_bytes = 0;
    std::string error;  // non-empty: no plan for this key
  };
  Plan build(const CudnnAttnKey& key);
  void execute(const Plan& p, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs);
  const Plan& plan_of(const CudnnAttnKey& key);

  const CudnnApi& api_;
  cudaStream_t st_;
  void* handle_ = nullptr;
  std::mutex mu_;
  std::map<CudnnAttnKey, Plan> plans_;
};

}  // namespace clm::cuda
