// Local launch of N ranks (see launch.h). mpirun is exec'd rather than re-implemented: it already
// provides what ranks need (the environment, a job that ends as a whole when a rank dies, forwarded
// output), and the same binary then works unchanged under a user's own mpirun on several hosts.
#include "dist/launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/common.h"
#include "dist/comm.h"

namespace clm {

namespace {

// `name` on PATH (CLOCKLM_MPIRUN overrides), or "" when absent.
std::string find_mpirun() {
  if (const char* e = std::getenv("CLOCKLM_MPIRUN"); e && *e) return e;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t colon = p.find(':', start);
    if (colon == std::string::npos) colon = p.size();
    std::string dir = p.substr(start, colon - start);
    start = colon + 1;
    if (dir.empty()) continue;
    std::string cand = dir + "/mpirun";
    if (::access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

}  // namespace

std::vector<std::string> local_launch_command(const std::string& mpirun, const std::string& exe, int nproc,
                                              const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {mpirun, "-n", std::to_string(nproc), "--oversubscribe", "--bind-to", "none"};
  if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");
  cmd.push_back(exe);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

std::vector<std::string> strip_nproc(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (argv[i].starts_with("--nproc=")) continue;
    out.push_back(argv[i]);
  }
  return out;
}

void exec_local_ranks(int nproc, const std::vector<std::string>& argv) {
  if (nproc < 1) fail("--nproc must be at least 1, got {}", nproc);
  if (launcher_world_size() > 1) fail("--nproc cannot be used inside a job already started by mpirun");
  if (!mpi_compiled())
    fail("--nproc {} needs the MPI transport, which this build lacks (install libopenmpi-dev openmpi-bin and "
         "rebuild)",
         nproc);
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) fail("--nproc {} needs mpirun, which is not on PATH (install openmpi-bin)", nproc);
  if (argv.empty()) fail("--nproc: no command line to launch");
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || exe.empty()) exe = argv[0];
  std::vector<std::string> rest = strip_nproc(argv);
  rest.erase(rest.begin());  // argv[0]: replaced by the resolved executable
  std::vector<std::string> cmd = local_launch_command(mpirun, exe, nproc, rest);
  std::vector<char*> cargv;
  for (std::string& a : cmd) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(cmd[0].c_str(), cargv.data());
  fail("--nproc: cannot run {}: {}", cmd[0], std::strerror(errno));
}

}  // namespace clm
