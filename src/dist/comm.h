// The communicator between training processes (ranks): all-reduce, reduce-scatter, all-gather,
// broadcast, barrier, abort. One implementation per transport: a single-process no-op (always),
// MPI (when found at configure time; CPU ranks on one or several hosts) and NCCL (with CUDA; GPU
// buffers). Data parallelism, the trainer's collective decisions and split evaluation are written
// against this interface only.
//
// Layering: dist sits above core and backend and below model/optim/eval/train, so any of those may
// take a Comm. Buffers passed to a communicator live where its transport reaches them: host memory
// for the no-op and MPI (the CPU backend's device pointers are host pointers), device memory for
// NCCL.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/common.h"

namespace clm {

class Backend;

enum class ReduceOp { Sum, Max };

// The largest element count one collective call takes (MPI counts are int); larger buffers go in
// pieces.
constexpr int64_t kMaxCollectiveCount = int64_t(1) << 30;

// What a communicator has done, for the per-step log and the benchmark: seconds spent inside
// collectives and payload bytes (the buffer sizes handed to them; a ring all-reduce moves about
// 2 (world-1)/world times its payload over each rank's link).
struct CommStats {
  double seconds = 0;
  double bytes = 0;
  int64_t calls = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual std::string name() const = 0;  // "single" | "mpi" | "nccl"
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Ranks on this host and this rank's index among them (threads per rank are divided by it).
  virtual int local_rank() const { return 0; }
  virtual int local_world() const { return 1; }

  // In place; every rank ends with the same values.
  virtual void all_reduce(float* buf, int64_t n, ReduceOp op) = 0;
  virtual void all_reduce(double* buf, int64_t n, ReduceOp op) = 0;
  // In place over blocks of unequal size: `buf` holds sum(counts) floats, block r (counts[r] floats,
  // starting at counts[0] + ... + counts[r-1]) belongs to rank r. reduce_scatter leaves in this
  // rank's block the sum over ranks of that block (the other blocks keep unspecified values);
  // all_gather copies every rank's block to all ranks. `counts` has world() entries, each below
  // 2^30 (the helpers below cut large buffers into buckets).
  virtual void reduce_scatter(float* buf, const std::vector<int64_t>& counts) = 0;
  virtual void all_gather(float* buf, const std::vector<int64_t>& counts) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job now (a rank that failed alone must not leave the others waiting in
  // a collective). Never returns.
  [[noreturn]] virtual void abort(int code) = 0;

  // ---- helpers built on the collectives ----
  // Every rank's `mine`, in rank order (small host-side data such as loader states).
  std::vector<std::string> all_gather_strings(const std::string& mine);
  // Sum in place over a contiguous float buffer in buckets of `bucket` floats, so a large gradient
  // buffer is never staged whole and each bucket can start as soon as it is complete.
  void all_reduce_buckets(float* buf, int64_t n, int64_t bucket);
  // ZeRO-style sharding of a contiguous buffer: rank r owns [bounds[r], bounds[r+1]) (world + 1
  // non-decreasing offsets, bounds[0] = 0, bounds[world] = the buffer's length). In buckets of
  // `bucket` floats: reduce_scatter_buckets leaves the sum over ranks in this rank's range,
  // all_gather_buckets copies each rank's range to every rank.
  void reduce_scatter_buckets(float* buf, const std::vector<int64_t>& bounds, int64_t bucket);
  void all_gather_buckets(float* buf, const std::vector<int64_t>& bounds, int64_t bucket);
  double max(double v);
  bool any(bool v);

  CommStats stats;
};

// Calls f(offset, counts) for each bucket [offset, offset + bucket) of [0, bounds.back()), where
// counts[r] is the length of rank r's range [bounds[r], bounds[r+1]) inside that bucket: the pieces
// in which a sharded buffer goes through reduce_scatter / all_gather.
template <class F>
void for_each_sharded_bucket(const std::vector<int64_t>& bounds, int world, int64_t bucket, F&& f) {
  if (int(bounds.size()) != world + 1 || bounds.front() != 0)
    fail("comm: shard bounds have {} entries for {} ranks", bounds.size(), world);
  bucket = bucket < 1 ? 1 : bucket;
  const int64_t n = bounds.back();
  std::vector<int64_t> counts(static_cast<size_t>(world));
  for (int64_t off = 0; off < n; off += bucket) {
    const int64_t end = n - off < bucket ? n : off + bucket;
    for (int r = 0; r < world; ++r) {
      const int64_t lo = bounds[size_t(r)] > off ? bounds[size_t(r)] : off;
      const int64_t hi = bounds[size_t(r) + 1] < end ? bounds[size_t(r) + 1] : end;
      counts[size_t(r)] = hi > lo ? hi - lo : 0;
    }
    f(off, counts);
  }
}

// Thrown on every rank together after a collective decision (divergence, a stop signal): each rank
// knows the others reach the same error, so the job ends in order rather than by abort.
struct CollectiveError : Error {
  using Error::Error;
};

// The process's communicator, created at the first call from the launcher's environment:
// OMPI_COMM_WORLD_SIZE/RANK (mpirun) selects MPI, nothing selects the single-process no-op. A job
// started by mpirun in a build without MPI is refused with one line saying so.
Comm& world_comm();
// The communicator for buffers on `device`: world itself where the device's memory is host memory
// (the CPU) or there is one rank; for GPU ranks an NCCL communicator bootstrapped over world (one
// GPU per rank), kept for the process's lifetime. A GPU backend without an NCCL build is an Error.
Comm& device_comm(Comm& world, const Backend& device);
// The device a rank uses when the user asked for `requested`: with several ranks on a host, each
// takes its own GPU (`cuda`, or `auto` where GPUs are present, become cuda:<local rank>).
std::string rank_device_name(const std::string& requested, const Comm& world);
// True once world_comm() was created with more than one rank (error handling in main).
bool world_comm_active();
// Whether this build has the MPI transport; the rank count the launcher's environment announces
// (1 when none).
bool mpi_compiled();
int launcher_world_size();

// Rows of the per-process transports, for tests and `clocklm info`.
std::vector<std::string> available_transports();

}  // namespace clm
