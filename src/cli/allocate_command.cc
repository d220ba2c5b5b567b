// `toposched allocate`: the what-if question for one node, answered by the same allocator the
// extender uses.
#include <cstdio>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "cli/commands.h"
#include "topology/allocator.h"
#include "topology/id_ranges.h"

namespace toposched::cli {

struct AllocateOptions {
  std::string instance_type;
  std::string used_devices;
  std::string used_cores;
  int devices = 0;
  int cores = 0;
  int lnc = 0;
  std::string policy = "best-fit";
  bool json = false;
};

std::shared_ptr<AllocateOptions> AddAllocateCommand(CLI::App& app) {
  auto opts = std::make_shared<AllocateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "allocate",
      "Answer what-if: which ids would a request get on one node of an instance type?\n"
      "Prints the ids and the devices they touch, or the reason there is no legal set.\n"
      "Exit 0 when allocated, 1 when it cannot be, 2 on invalid usage.\n"
      "Example: toposched allocate --instance-type trn1.32xlarge --used 0-3 --devices 4");
  cmd->add_option("--instance-type,-t", opts->instance_type,
                  "Instance type as in the node label node.kubernetes.io/instance-type")
      ->required();
  auto* devices = cmd->add_option("--devices,-d", opts->devices,
                                  "Request N whole devices (aws.amazon.com/neuron)");
  auto* cores = cmd->add_option("--cores,-c", opts->cores,
                                "Request N cores (aws.amazon.com/neuroncore) instead of devices");
  devices->excludes(cores);
  cmd->add_option("--used", opts->used_devices,
                  "Devices already in use on the node, e.g. 0-3,8 (default: none)");
  cmd->add_option("--used-cores", opts->used_cores,
                  "Cores already in use, numbered node-wide (device*cores_per_device+k), e.g. 0-5");
  cmd->add_option("--lnc", opts->lnc,
                  "Logical NeuronCore setting for types that have one (Trn2: 1 or 2; default 2)");
  cmd->add_option("--policy", opts->policy,
                  "best-fit (ours: keep large free blocks whole) or first-fit (lowest ids, as AWS)")
      ->capture_default_str();
  cmd->add_flag("--json", opts->json,
                "Print one JSON object: {\"ids\":[...],\"devices\":[...]} or {\"error\":\"...\"}");
  return opts;
}

namespace {

int Fail(const AllocateOptions& opts, int code, const std::string& message) {
  if (opts.json) {
    fmt::print("{}\n", WriteJson({{"error", message}}));
  } else {
    fmt::print(stderr, "{}: {}\n", code == kExitUsage ? "error" : "cannot allocate", message);
  }
  return code;
}

}  // namespace

int RunAllocate(const AllocateOptions& opts, const std::string& catalog_path) {
  using namespace topology;
  auto catalog = LoadCatalog(catalog_path);
  if (!catalog.ok()) return Fail(opts, kExitUsage, catalog.error());
  const InstanceType* type = catalog.value()->Find(opts.instance_type);
  if (type == nullptr)
    return Fail(opts, kExitUsage, Catalog::UnknownTypeMessage(opts.instance_type));
  auto shape = NodeShape::Make(*type, opts.lnc);
  if (!shape.ok()) return Fail(opts, kExitUsage, shape.error());
  auto policy = ParsePolicy(opts.policy);
  if (!policy.ok()) return Fail(opts, kExitUsage, policy.error());

  if ((opts.devices == 0) == (opts.cores == 0)) {
    return Fail(opts, kExitUsage, "give exactly one of --devices N or --cores N (N at least 1)");
  }
  const Request request{opts.devices != 0 ? Unit::kDevice : Unit::kCore,
                        opts.devices != 0 ? opts.devices : opts.cores};
  const int total = request.unit == Unit::kDevice ? shape->devices : shape->cores;
  if (request.count < 0 || request.count > total) {
    return Fail(opts, kExitUsage,
                fmt::format("--{} {} is out of range: {} has {} {}{}",
                            request.unit == Unit::kDevice ? "devices" : "cores", request.count,
                            type->name, total, UnitName(request.unit, total),
                            shape->lnc != 0 ? fmt::format(" at LNC {}", shape->lnc) : ""));
  }

  NodeUsage usage;
  auto used_devices = ParseIdRanges(opts.used_devices, shape->devices);
  if (!used_devices.ok()) return Fail(opts, kExitUsage, "--used: " + used_devices.error());
  auto used_cores = ParseIdRanges(opts.used_cores, shape->cores);
  if (!used_cores.ok()) return Fail(opts, kExitUsage, "--used-cores: " + used_cores.error());
  usage.Take(*shape, Unit::kDevice, used_devices.value());
  if (!usage.Take(*shape, Unit::kCore, used_cores.value())) {
    return Fail(opts, kExitUsage, "--used-cores overlaps the devices given with --used");
  }

  const Decision decision = Allocate(*shape, usage, request, *policy);
  if (!decision.ok()) return Fail(opts, kExitRefused, decision.reason);
  const std::vector<int> touched = MaskToIds(decision.placement.devices);
  if (opts.json) {
    fmt::print("{}\n", WriteJson({{"ids", decision.placement.ids}, {"devices", touched}}));
  } else {
    fmt::print("{} {} on {} ({}):\n", request.count, UnitName(request.unit, request.count),
               type->name, PolicyName(*policy));
    fmt::print("  ids:     {}\n", FormatIdList(decision.placement.ids));
    fmt::print("  devices: {}\n", FormatIdList(touched));
    fmt::print("  score:   {}/10 (how well it packs: 10 fills a hole exactly)\n", decision.score);
  }
  return kExitOk;
}

}  // namespace toposched::cli
