// toposched: topology-aware scheduling for accelerators on Kubernetes. One binary, subcommands.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/allocator.h"
#include "cli/commands.h"

namespace toposched::cli {

Result<const topology::Catalog*> LoadCatalog(const std::string& path) {
  if (path.empty()) return &topology::Catalog::Embedded();
  std::ifstream in(path);
  if (!in) return Error{fmt::format("cannot read catalog file {}", path)};
  std::stringstream text;
  text << in.rdbuf();
  TOPOSCHED_ASSIGN_OR_RETURN(auto parsed, topology::Catalog::Parse(text.str(), path));
  // The catalog lives for the whole run.
  static topology::Catalog loaded;
  loaded = std::move(parsed);
  return &loaded;
}

}  // namespace toposched::cli

int main(int argc, char** argv) {
  using namespace toposched::cli;
  // Run through a symlink named kubectl-neuron (how kubectl finds a plugin): the plugin alone.
  if (argc > 0 && std::filesystem::path(argv[0]).filename() == kKubectlNeuron) {
    return RunKubectlNeuron(argc, argv, "");
  }
  CLI::App app{
      "toposched: topology-aware placement of accelerator devices and cores (AWS Neuron and "
      "others) for Kubernetes.\nRun `toposched SUBCOMMAND --help` for each subcommand's flags."};
  app.require_subcommand(1);
  std::string catalog_path;
  app.add_option("--catalog", catalog_path,
                 "Instance-type catalog (YAML) to use instead of the one built in; see "
                 "catalog/instance-types.yaml for the format")
      ->check(CLI::ExistingFile);
  app.set_version_flag("--version",
                       "toposched " TOPOSCHED_VERSION " (allocator: " + AllocatorName() + ")");

  auto allocate = AddAllocateCommand(app);
  auto simulate = AddSimulateCommand(app);
  auto extender = AddExtenderCommand(app);
  auto device_plugin = AddDevicePluginCommand(app);
  auto dra_plugin = AddDraPluginCommand(app);
  auto admission_webhook = AddAdmissionWebhookCommand(app);
  auto partition_service = AddPartitionServiceCommand(app);
  // Listed for the help and the check below; its flags are its own (RunKubectlNeuron).
  app.add_subcommand(std::string(kKubectlNeuron),
                     "kubectl neuron: nodes, pods, why (run it with --help)");

  // CLI11 answers an unknown word with "A subcommand is required" (or, with --help after it, the
  // main help and exit 0): name it, list the real ones, and exit 2.
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--catalog") {
      if (i + 1 < argc) catalog_path = argv[i + 1];
      ++i;
      continue;
    }
    if (arg.starts_with("-")) continue;
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), arg) == names.end()) {
      fmt::print(stderr, "toposched: unknown subcommand '{}'; the subcommands are: {}\n", arg,
                 fmt::join(names, ", "));
      return kExitUsage;
    }
    if (arg == kKubectlNeuron) return RunKubectlNeuron(argc - i, argv + i, catalog_path);
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (app.got_subcommand("allocate")) return RunAllocate(*allocate, catalog_path);
  if (app.got_subcommand("simulate")) return RunSimulate(*simulate, catalog_path);
  if (app.got_subcommand("extender")) return RunExtender(*extender, catalog_path);
  if (app.got_subcommand("device-plugin")) return RunDevicePlugin(*device_plugin, catalog_path);
  if (app.got_subcommand("dra-plugin")) return RunDraPlugin(*dra_plugin, catalog_path);
  if (app.got_subcommand("admission-webhook")) return RunAdmissionWebhook(*admission_webhook);
  if (app.got_subcommand("partition-service")) return RunPartitionService(*partition_service);
  return kExitUsage;
}
