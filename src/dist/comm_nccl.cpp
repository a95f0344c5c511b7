// The NCCL communicator (see comm_nccl.h). Every collective runs on the communicator's own CUDA
// stream and is waited for before returning, so callers see the same blocking semantics as MPI;
// overlapping it with the backward pass is not done yet. Host buffers are staged through device
// memory, so the trainer's small host-side decisions can use the same communicator. On a failure
// that only this rank sees, abort() tears NCCL down and ends the job through the bootstrap
// communicator (MPI_Abort), so no peer waits in a collective.
#include "dist/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <memory>

#include "dist/watchdog.h"

namespace clm {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("nccl: {}: {}", what, cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("nccl: {}: {}", what, ncclGetErrorString(r));
}

class NcclComm final : public Comm {
 public:
  NcclComm(Comm& bootstrap, int device) : boot_(bootstrap) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    if (boot_.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    boot_.broadcast(&id, sizeof id, 0);
    check_nccl(ncclCommInitRank(&comm_, boot_.world(), id, boot_.rank()), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaMalloc(&scratch_, 16), "cudaMalloc");
    watchdog_ = std::make_unique<CollectiveWatchdog>(boot_.rank(), boot_.world());
  }
  ~NcclComm() override {
    watchdog_.reset();
    if (stage_) cudaFree(stage_);
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }
  std::string name() const override { return "nccl"; }
  int rank() const override { return boot_.rank(); }
  int world() const override { return boot_.world(); }
  int local_rank() const override { return boot_.local_rank(); }
  int local_world() const override { return boot_.local_world(); }

  void all_reduce(float* buf, int64_t n, ReduceOp op) override {
    staged(buf, size_t(n) * 4, [&](void* p) {
      return ncclAllReduce(p, p, size_t(n), ncclFloat32, nccl_op(op), comm_, stream_);
    });
  }
  void all_reduce(double* buf, int64_t n, ReduceOp op) override {
    staged(buf, size_t(n) * 8, [&](void* p) {
      return ncclAllReduce(p, p, size_t(n), ncclFloat64, nccl_op(op), comm_, stream_);
    });
  }
  // NCCL's reduce-scatter and all-gather take equal blocks, so blocks of unequal size go as one
  // group of per-root reduces (each rank's block summed onto its owner) or broadcasts.
  void reduce_scatter(float* buf, const std::vector<int64_t>& counts) override {
    grouped(buf, counts, [&](float* p, size_t n, int root) {
      return ncclReduce(p, p, n, ncclFloat32, ncclSum, root, comm_, stream_);
    });
  }
  void all_gather(float* buf, const std::vector<int64_t>& counts) override {
    grouped(buf, counts, [&](float* p, size_t n, int root) {
      return ncclBroadcast(p, p, n, ncclFloat32, root, comm_, stream_);
    });
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    staged(buf, bytes, [&](void* p) { return ncclBroadcast(p, p, bytes, ncclChar, root, comm_, stream_); });
  }
  void barrier() override {
    run(0, ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
  }
  [[noreturn]] void abort(int code) override {
    ncclCommAbort(comm_);
    boot_.abort(code);
    std::_Exit(code);  // not reached: the bootstrap's abort ends the process
  }

 private:
  static ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }
  void run(double bytes, ncclResult_t issued) {
    const double t0 = now_seconds();
    check_nccl(issued, "collective");
    wait();
    stats.seconds += now_seconds() - t0;
    stats.bytes += bytes;
    ++stats.calls;
  }
  void wait() {
    watchdog_->enter("nccl collective");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    watchdog_->leave();
  }

  // Device buffers (gradients, parameters) are used in place. Host buffers (the trainer's
  // decisions, loader positions, evaluation sums: a few bytes each) go through a device staging
  // buffer, copied on the collective's own stream so the copies and the collective stay in order.
  template <class F>
  void staged(void* buf, size_t bytes, F&& issue) {
    if (bytes == 0) return;
    if (on_device(buf)) {
      run(double(bytes), issue(buf));
      return;
    }
    if (bytes > stage_bytes_) {
      if (stage_) cudaFree(stage_);
      stage_ = nullptr;
      check_cuda(cudaMalloc(&stage_, bytes), "cudaMalloc (staging)");
      stage_bytes_ = bytes;
    }
    check_cuda(cudaMemcpyAsync(stage_, buf, bytes, cudaMemcpyHostToDevice, stream_), "staging copy");
    run(double(bytes), issue(stage_));
    check_cuda(cudaMemcpyAsync(buf, stage_, bytes, cudaMemcpyDeviceToHost, stream_), "staging copy");
    wait();
  }
  static bool on_device(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // an unknown pointer is host memory; clear the error
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }

  template <class F>
  void grouped(float* buf, const std::vector<int64_t>& counts, F&& op) {
    if (int(counts.size()) != world()) fail("nccl: {} block counts for {} ranks", counts.size(), world());
    int64_t total = 0;
    for (int64_t n : counts) total += n;
    staged(buf, size_t(total) * 4, [&](void* dev) {
      float* p = static_cast<float*>(dev);
      int64_t off = 0;
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < world(); ++r) {
        const int64_t n = counts[size_t(r)];
        if (n > 0) check_nccl(op(p + off, size_t(n), r), "grouped collective");
        off += n;
      }
      return ncclGroupEnd();
    });
  }

  Comm& boot_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  void* stage_ = nullptr;
  size_t stage_bytes_ = 0;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, int device) {
  return std::make_unique<NcclComm>(bootstrap, device);
}

}  // namespace clm
