// clocklm entry point: builds the CLI11 app from every area's subcommands and turns user errors
// into one line on stderr and a non-zero exit.
#include <csignal>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/common.h"

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
  clm::register_engine_commands(app);
  clm::register_bench_commands(app);
  clm::register_eval_commands(app);
  clm::register_exp_commands(app);
  clm::register_agent_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const clm::Error& e) {
    std::fprintf(stderr, "clocklm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clocklm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
