// `--nproc N`: starts N local ranks of the same command through mpirun, so one host's ranks need
// no launcher knowledge (docs/TRAINING.md). mpirun gives each rank the environment that
// world_comm() reads and ends every rank when one fails.
#pragma once
#include <string>
#include <vector>

namespace clm {

// The mpirun command line that runs `args` (this program's arguments without --nproc) as `nproc`
// local ranks: oversubscription allowed (more ranks than cores is legal, only slower), no core
// binding (each rank's OpenMP threads choose their cores), --allow-run-as-root when root.
std::vector<std::string> local_launch_command(const std::string& mpirun, const std::string& exe, int nproc,
                                              const std::vector<std::string>& args);
// `argv` (argv[0] first) without "--nproc N" / "--nproc=N".
std::vector<std::string> strip_nproc(const std::vector<std::string>& argv);
// Replaces this process with the local launch of `argv` (argv[0] first) on `nproc` ranks. Fails
// with one line when MPI is not compiled in, mpirun is not installed, or this process already is
// one rank of a job.
[[noreturn]] void exec_local_ranks(int nproc, const std::vector<std::string>& argv);

}  // namespace clm
