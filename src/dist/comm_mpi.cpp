// The MPI communicator (see comm_mpi.h). MPI's default error handler ends the whole job on a
// communication failure, and mpirun ends every rank when one exits abnormally, so a failed rank
// never leaves the others waiting; abort() is MPI_Abort for failures that only one rank sees.
#include "dist/comm_mpi.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <vector>

#include "dist/watchdog.h"

namespace clm {

namespace {

constexpr int64_t kMaxCount = kMaxCollectiveCount;

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
    if (world_ > 1) watchdog_ = std::make_unique<CollectiveWatchdog>(rank_, world_);
  }
  ~MpiComm() override {
    watchdog_.reset();
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

  void reduce_scatter(float* buf, const std::vector<int64_t>& counts) override {
    const int64_t total = layout(counts);
    Timed t(*this, double(total) * 4, "reduce-scatter");
    // Into a scratch block, then in place: MPI_IN_PLACE for reduce-scatter would put the result at
    // the start of the buffer rather than at this rank's block.
    const int64_t mine = counts[size_t(rank_)];
    scratch_.resize(size_t(std::max<int64_t>(mine, 1)));
    MPI_Reduce_scatter(buf, scratch_.data(), icounts_.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::copy(scratch_.begin(), scratch_.begin() + mine, buf + displs_[size_t(rank_)]);
  }
  void all_gather(float* buf, const std::vector<int64_t>& counts) override {
    const int64_t total = layout(counts);
    Timed t(*this, double(total) * 4, "all-gather");
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, icounts_.data(), displs_.data(), MPI_FLOAT,
                   MPI_COMM_WORLD);
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    Timed t(*this, double(bytes), "broadcast");
    char* p = static_cast<char*>(buf);
    for (size_t off = 0; off < bytes; off += size_t(kMaxCount))
      MPI_Bcast(p + off, int(std::min<size_t>(size_t(kMaxCount), bytes - off)), MPI_BYTE, root, MPI_COMM_WORLD);
  }
  void barrier() override {
    Timed t(*this, 0, "barrier");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  // Counts a collective's time and payload, and keeps the watchdog informed while it runs.
  struct Timed {
    MpiComm& c;
    double t0;
    Timed(MpiComm& comm, double bytes, const char* what) : c(comm), t0(now_seconds()) {
      c.stats.bytes += bytes;
      ++c.stats.calls;
      if (c.watchdog_) c.watchdog_->enter(what);
    }
    ~Timed() {
      if (c.watchdog_) c.watchdog_->leave();
      c.stats.seconds += now_seconds() - t0;
    }
  };

  void reduce(void* buf, int64_t n, MPI_Datatype type, int size, ReduceOp op) {
    Timed t(*this, double(n) * size, "all-reduce");
    char* p = static_cast<char*>(buf);
    for (int64_t off = 0; off < n; off += kMaxCount)
      MPI_Allreduce(MPI_IN_PLACE, p + off * size, int(std::min(kMaxCount, n - off)), type,
                    op == ReduceOp::Sum ? MPI_SUM : MPI_MAX, MPI_COMM_WORLD);
  }

  // MPI's int counts and displacements of a blocked buffer; returns its length.
  int64_t layout(const std::vector<int64_t>& counts) {
    if (int(counts.size()) != world_) fail("mpi: {} block counts for {} ranks", counts.size(), world_);
    icounts_.assign(counts.size(), 0);
    displs_.assign(counts.size(), 0);
    int64_t off = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] < 0 || counts[r] > kMaxCount || off > kMaxCount)
        fail("mpi: a block of {} floats at offset {} is too large for one collective", counts[r], off);
      icounts_[r] = int(counts[r]);
      displs_[r] = int(off);
      off += counts[r];
    }
    return off;
  }

  int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1;
  std::vector<int> icounts_, displs_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm() { return std::make_unique<MpiComm>(); }

}  // namespace clm
