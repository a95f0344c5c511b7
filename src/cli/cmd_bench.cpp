// Subcommands of the bench area (placeholder until the engine issue fills it in).
#include "cli/commands.h"

namespace clm {
void register_bench_commands(CLI::App& app) { (void)app; }
}  // namespace clm
