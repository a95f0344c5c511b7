// clocklm entry point: builds the CLI11 app from every area's subcommands and turns user errors
// into one line on stderr and a non-zero exit. In a job of several ranks, an error that every rank
// reaches together (CollectiveError) is printed by rank 0 and each rank exits in order; any other
// error names its rank and aborts the job, so no rank waits for one that has gone.
#include <csignal>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/common.h"
#include "dist/comm.h"

namespace {

int report_error(const std::exception& e, bool collective) {
  if (!clm::world_comm_active()) {
    std::fprintf(stderr, "clocklm: error: %s\n", e.what());
    return 1;
  }
  clm::Comm& comm = clm::world_comm();
  if (collective) {
    if (comm.rank() == 0) std::fprintf(stderr, "clocklm: error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "clocklm: error: rank %d of %d: %s (ending the other ranks)\n", comm.rank(), comm.world(),
               e.what());
  std::fflush(stderr);
  comm.abort(1);
  return 1;  // not reached: abort() ends the process
}

}  // namespace

int main(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f) then fails with EFBIG, which the writers report as
  // a one-line error with the previous files intact, instead of the process dying on SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"clocklm: train a language model from scratch in a fixed budget of device time"};
  app.set_version_flag("--version", std::string(CLOCKLM_VERSION));
  app.require_subcommand(1);
  clm::register_info_commands(app);
  clm::register_tokenizer_commands(app);
  clm::register_data_commands(app);
  clm::register_train_commands(app);
  clm::register_bench_commands(app);
  clm::register_eval_commands(app);
  clm::register_export_commands(app);
  clm::register_exp_commands(app);
  clm::register_agent_commands(app);
  clm::register_serve_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const clm::CollectiveError& e) {
    return report_error(e, true);
  } catch (const std::exception& e) {
    return report_error(e, false);
  }
  return 0;
}
