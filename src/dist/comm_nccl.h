// The NCCL transport (comm_nccl.cpp, compiled when CMake finds CUDA and NCCL): collectives between
// GPUs on device memory, one GPU per rank. The ranks are started by mpirun as for MPI; the MPI
// communicator carries NCCL's bootstrap id and the host-side decisions.
#pragma once
#include <memory>

#include "dist/comm.h"

namespace clm {

// One rank per GPU: this rank uses CUDA device `device` (usually its local rank). `bootstrap`
// must outlive the result.
std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, int device);

}  // namespace clm
