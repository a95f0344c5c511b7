// The MPI communicator (see comm_mpi.h). MPI's default error handler ends the whole job on a
// communication failure, and mpirun ends every rank when one exits abnormally, so a failed rank
// never leaves the others waiting; abort() is MPI_Abort for failures that only one rank sees.
#include "dist/comm_mpi.h"

#include <mpi.h>

#include <algorithm>
#include <climits>

namespace clm {

namespace {

// MPI counts are int: larger buffers go in pieces of this many elements.
constexpr int64_t kMaxCount = int64_t(1) << 30;

class MpiComm final : public Comm {
 public:
  MpiComm() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // Only the main thread calls MPI (the loader's prefetch thread never does).
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_world_);
    MPI_Comm_free(&local);
  }
  ~MpiComm() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  int local_world() const override { return local_world_; }

  void all_reduce(float* buf, int64_t n, ReduceOp op) override { reduce(buf, n, MPI_FLOAT, 4, op); }
  void all_reduce(double* buf, int64_t n, ReduceOp op) override { reduce(buf, n, MPI_DOUBLE, 8, op); }

  void reduce_scatter(const float* send, float* recv, int64_t n) override {
    Timed t(*this, double(n) * 4 * world_);
    if (n > kMaxCount) fail("mpi: reduce-scatter of {} floats per rank is too large", n);
    MPI_Reduce_scatter_block(send, recv, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  void all_gather(const float* send, float* recv, int64_t n) override {
    Timed t(*this, double(n) * 4 * world_);
    if (n > kMaxCount) fail("mpi: all-gather of {} floats per rank is too large", n);
    const void* s = send == recv + int64_t(rank_) * n ? MPI_IN_PLACE : send;
    MPI_Allgather(s, int(n), MPI_FLOAT, recv, int(n), MPI_FLOAT, MPI_COMM_WORLD);
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    Timed t(*this, double(bytes));
    char* p = static_cast<char*>(buf);
    for (size_t off = 0; off < bytes; off += size_t(kMaxCount))
      MPI_Bcast(p + off, int(std::min<size_t>(size_t(kMaxCount), bytes - off)), MPI_BYTE, root, MPI_COMM_WORLD);
  }
  void barrier() override {
    Timed t(*this, 0);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  struct Timed {
    Comm& c;
    double t0;
    Timed(Comm& comm, double bytes) : c(comm), t0(now_seconds()) {
      c.stats.bytes += bytes;
      ++c.stats.calls;
    }
    ~Timed() { c.stats.seconds += now_seconds() - t0; }
  };

  void reduce(void* buf, int64_t n, MPI_Datatype type, int size, ReduceOp op) {
    Timed t(*this, double(n) * size);
    char* p = static_cast<char*>(buf);
    for (int64_t off = 0; off < n; off += kMaxCount)
      MPI_Allreduce(MPI_IN_PLACE, p + off * size, int(std::min(kMaxCount, n - off)), type,
                    op == ReduceOp::Sum ? MPI_SUM : MPI_MAX, MPI_COMM_WORLD);
  }

  int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm() { return std::make_unique<MpiComm>(); }

}  // namespace clm
