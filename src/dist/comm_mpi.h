// The MPI transport (comm_mpi.cpp, compiled when CMake finds MPI): ranks started by mpirun, on one
// host or several. Collectives work on host memory.
#pragma once
#include <memory>

#include "dist/comm.h"

namespace clm {

// Initialises MPI (once per process; finalised when the communicator is destroyed at exit).
std::unique_ptr<Comm> make_mpi_comm();

}  // namespace clm
