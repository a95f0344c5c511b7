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

enum class ReduceOp { Sum, Max };

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
  // send: world * n floats; recv: n floats = the sum over ranks of this rank's block of send.
  virtual void reduce_scatter(const float* send, float* recv, int64_t n) = 0;
  // send: n floats (may be recv + rank * n); recv: world * n floats, block r from rank r.
  virtual void all_gather(const float* send, float* recv, int64_t n) = 0;
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
  double max(double v);
  bool any(bool v);

  CommStats stats;
};

// Thrown on every rank together after a collective decision (divergence, a stop signal): each rank
// knows the others reach the same error, so the job ends in order rather than by abort.
struct CollectiveError : Error {
  using Error::Error;
};

// The process's communicator, created at the first call from the launcher's environment:
// OMPI_COMM_WORLD_SIZE/RANK (mpirun) selects MPI, nothing selects the single-process no-op. A job
// started by mpirun in a build without MPI is refused with one line saying so.
Comm& world_comm();
// True once world_comm() was created with more than one rank (error handling in main).
bool world_comm_active();
// Whether this build has the MPI transport; the rank count the launcher's environment announces
// (1 when none).
bool mpi_compiled();
int launcher_world_size();

// Rows of the per-process transports, for tests and `clocklm info`.
std::vector<std::string> available_transports();

}  // namespace clm
