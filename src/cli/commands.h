// Each area registers its subcommands on the CLI11 app; main.cpp calls every register_* below.
#pragma once
#include <CLI/CLI.hpp>

namespace clm {
void register_tokenizer_commands(CLI::App& app);  // tokenizer train|encode|decode   (cli/cmd_tokenizer.cpp)
void register_data_commands(CLI::App& app);       // prepare, data inspect          (cli/cmd_data.cpp)
void register_train_commands(CLI::App& app);      // model, train                  (cli/cmd_train.cpp)
void register_eval_commands(CLI::App& app);       // eval bpb|core, sample          (cli/cmd_eval.cpp)
void register_exp_commands(CLI::App& app);        // roofline, profile, runs, report, compare,
                                                  // leaderboard, sweep             (cli/cmd_exp.cpp)
void register_bench_commands(CLI::App& app);       // bench train                   (cli/cmd_bench.cpp)
void register_info_commands(CLI::App& app);       // info (machine, threads, CUDA devices)
void register_export_commands(CLI::App& app);     // export                         (cli/cmd_export.cpp)
void register_serve_commands(CLI::App& app);      // serve (the live lab in the browser; cli/cmd_serve.cpp)
void register_agent_commands(CLI::App& app);      // mcp, exp init|submit|list|status|cancel|
                                                  // results|journal|run   (cli/cmd_agent.cpp)
}  // namespace clm
