// Subcommands of the engine area (placeholder until that area's issue fills it in).
#include "cli/commands.h"

namespace clm {
void register_engine_commands(CLI::App& app) { (void)app; }
}  // namespace clm
