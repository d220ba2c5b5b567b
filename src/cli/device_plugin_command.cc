// Placeholder until the device-plugin part lands: the subcommand exists and says so.
#include <fmt/format.h>

#include "cli/commands.h"

namespace toposched::cli {
struct DevicePluginOptions {};
std::shared_ptr<DevicePluginOptions> AddDevicePluginCommand(CLI::App& app) {
  app.add_subcommand("device-plugin", "(not built yet)");
  return std::make_shared<DevicePluginOptions>();
}
int RunDevicePlugin(const DevicePluginOptions&, const std::string&) {
  fmt::print(stderr, "toposched device-plugin is not built yet\n");
  return kExitUsage;
}
}  // namespace toposched::cli
