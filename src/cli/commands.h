// Subcommands of the `toposched` binary. Each Add*Command registers its flags on the app and
// returns the options it will read; main() runs the one the user chose.
#ifndef TOPOSCHED_CLI_COMMANDS_H_
#define TOPOSCHED_CLI_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <CLI/CLI.hpp>

#include "base/result.h"
#include "topology/catalog.h"

namespace toposched::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;  // a well-formed question whose answer is "no"
inline constexpr int kExitUsage = 2;    // bad flags or input

// --watch-list's help: the extender and the device plugin share the flag (kube/informer.h).
inline constexpr const char* kWatchListHelp =
    "Read pods (and nodes) with a watch list (sendInitialEvents, Kubernetes 1.27+ with the "
    "WatchList feature, on by default from 1.34) instead of a paginated LIST; a server that "
    "does not serve it is read with LIST and WATCH, logged once. false: LIST and WATCH only";

// "HOST:PORT" ("[::1]:PORT"; an empty host is 0.0.0.0) as host and port; errors name `flag`.
Result<std::pair<std::string, uint16_t>> SplitListen(const std::string& listen,
                                                     std::string_view flag);

// The catalog to use: --catalog FILE if given, else the embedded one.
Result<const topology::Catalog*> LoadCatalog(const std::string& path);

struct AllocateOptions;
std::shared_ptr<AllocateOptions> AddAllocateCommand(CLI::App& app);
int RunAllocate(const AllocateOptions& options, const std::string& catalog_path);

struct SimulateOptions;
std::shared_ptr<SimulateOptions> AddSimulateCommand(CLI::App& app);
int RunSimulate(const SimulateOptions& options, const std::string& catalog_path);

struct ExtenderOptions;
std::shared_ptr<ExtenderOptions> AddExtenderCommand(CLI::App& app);
int RunExtender(const ExtenderOptions& options, const std::string& catalog_path);

struct DevicePluginOptions;
std::shared_ptr<DevicePluginOptions> AddDevicePluginCommand(CLI::App& app);
int RunDevicePlugin(const DevicePluginOptions& options, const std::string& catalog_path);

struct DraPluginOptions;
std::shared_ptr<DraPluginOptions> AddDraPluginCommand(CLI::App& app);
int RunDraPlugin(const DraPluginOptions& options, const std::string& catalog_path);

struct AdmissionWebhookOptions;
std::shared_ptr<AdmissionWebhookOptions> AddAdmissionWebhookCommand(CLI::App& app);
int RunAdmissionWebhook(const AdmissionWebhookOptions& options);

struct PartitionServiceOptions;
std::shared_ptr<PartitionServiceOptions> AddPartitionServiceCommand(CLI::App& app);
int RunPartitionService(const PartitionServiceOptions& options);

// `kubectl neuron` (kubectl/plugin.h): argv[0] is the plugin's own name or the subcommand word;
// parses the rest with its own flags.
int RunKubectlNeuron(int argc, char** argv, const std::string& catalog_path);
inline constexpr std::string_view kKubectlNeuron = "kubectl-neuron";

}  // namespace toposched::cli

#endif  // TOPOSCHED_CLI_COMMANDS_H_
