#include "cli/commands.h"
namespace toposched::cli {
struct SimulateOptions {};
std::shared_ptr<SimulateOptions> AddSimulateCommand(CLI::App& app) {
  app.add_subcommand("simulate", "Replay a trace (not yet built)");
  return std::make_shared<SimulateOptions>();
}
int RunSimulate(const SimulateOptions&, const std::string&) { return 0; }
}  // namespace toposched::cli
