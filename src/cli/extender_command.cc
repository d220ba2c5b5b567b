// Placeholder until the extender part lands: the subcommand exists and says so.
#include <fmt/format.h>

#include "cli/commands.h"

namespace toposched::cli {
struct ExtenderOptions {};
std::shared_ptr<ExtenderOptions> AddExtenderCommand(CLI::App& app) {
  app.add_subcommand("extender", "(not built yet)");
  return std::make_shared<ExtenderOptions>();
}
int RunExtender(const ExtenderOptions&, const std::string&) {
  fmt::print(stderr, "toposched extender is not built yet\n");
  return kExitUsage;
}
}  // namespace toposched::cli
