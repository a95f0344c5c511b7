// The single-process communicator, the helpers shared by every transport, and the choice of
// transport from the launcher's environment (see comm.h).
#include "dist/comm.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "backend/backend.h"
#include "dist/comm_mpi.h"
#ifdef CLOCKLM_HAVE_NCCL
#include "dist/comm_nccl.h"
#endif

namespace clm {

namespace {

// One process: every collective leaves the data as it is (a sum or max over one rank).
class SingleComm final : public Comm {
 public:
  std::string name() const override { return "single"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_reduce(float*, int64_t, ReduceOp) override {}
  void all_reduce(double*, int64_t, ReduceOp) override {}
  void reduce_scatter(float*, const std::vector<int64_t>&) override {}
  void all_gather(float*, const std::vector<int64_t>&) override {}
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  long v = std::strtol(e, &end, 10);
  return (end && *end == '\0' && v >= 0) ? int(v) : fallback;
}

std::unique_ptr<Comm>& comm_slot() {
  static std::unique_ptr<Comm> c;
  return c;
}

}  // namespace

std::vector<std::string> Comm::all_gather_strings(const std::string& mine) {
  std::vector<std::string> out(static_cast<size_t>(world()));
  for (int r = 0; r < world(); ++r) {
    uint64_t len = r == rank() ? mine.size() : 0;
    broadcast(&len, sizeof len, r);
    out[size_t(r)] = r == rank() ? mine : std::string(len, '\0');
    if (len) broadcast(out[size_t(r)].data(), len, r);
  }
  return out;
}

void Comm::all_reduce_buckets(float* buf, int64_t n, int64_t bucket) {
  if (world() == 1) return;
  bucket = std::max<int64_t>(bucket, 1);
  for (int64_t off = 0; off < n; off += bucket) all_reduce(buf + off, std::min(bucket, n - off), ReduceOp::Sum);
}

void Comm::reduce_scatter_buckets(float* buf, const std::vector<int64_t>& bounds, int64_t bucket) {
  if (world() == 1) return;
  for_each_sharded_bucket(bounds, world(), std::min(bucket, kMaxCollectiveCount),
                          [&](int64_t off, const std::vector<int64_t>& c) { reduce_scatter(buf + off, c); });
}

void Comm::all_gather_buckets(float* buf, const std::vector<int64_t>& bounds, int64_t bucket) {
  if (world() == 1) return;
  for_each_sharded_bucket(bounds, world(), std::min(bucket, kMaxCollectiveCount),
                          [&](int64_t off, const std::vector<int64_t>& c) { all_gather(buf + off, c); });
}

double Comm::max(double v) {
  all_reduce(&v, 1, ReduceOp::Max);
  return v;
}

bool Comm::any(bool v) { return max(v ? 1.0 : 0.0) > 0; }

int launcher_world_size() { return std::max(1, env_int("OMPI_COMM_WORLD_SIZE", 1)); }

bool mpi_compiled() {
#ifdef CLOCKLM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Comm& world_comm() {
  std::unique_ptr<Comm>& c = comm_slot();
  if (c) return *c;
  const int n = launcher_world_size();
  if (n > 1) {
#ifdef CLOCKLM_HAVE_MPI
    c = make_mpi_comm();
#else
    fail("started as one of {} ranks (mpirun), but this build has no MPI support; install libopenmpi-dev and "
         "rebuild, or run a single process",
         n);
#endif
  } else {
    c = std::make_unique<SingleComm>();
  }
  return *c;
}

Comm& device_comm(Comm& world, const Backend& device) {
  if (world.world() == 1 || device.host_visible()) return world;
  static std::unique_ptr<Comm> gpu;
  if (gpu) return *gpu;
  const std::string name = device.name();  // "cuda:N"
  const size_t colon = name.find(':');
  const int index = colon == std::string::npos ? 0 : std::atoi(name.c_str() + colon + 1);
#ifdef CLOCKLM_HAVE_NCCL
  gpu = make_nccl_comm(world, index);
  return *gpu;
#else
  (void)index;
  fail("{} ranks on {} need the NCCL transport, and this build has none (CMake found no NCCL)",
       world.world(), name);
#endif
}

std::string rank_device_name(const std::string& requested, const Comm& world) {
  if (world.world() == 1) return requested;
  const bool gpus = available_backends().size() > 1;  // "cpu" plus one "cuda:N" per usable GPU
  if (requested == "cuda" || (requested == "auto" && gpus))
    return fmt::format("cuda:{}", world.local_rank());
  return requested;
}

bool world_comm_active() { return comm_slot() && comm_slot()->world() > 1; }

std::vector<std::string> available_transports() {
  std::vector<std::string> v = {"single"};
  if (mpi_compiled()) v.push_back("mpi");
#ifdef CLOCKLM_HAVE_NCCL
  v.push_back("nccl");
#endif
  return v;
}

}  // namespace clm
