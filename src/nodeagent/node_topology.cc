#include "nodeagent/node_topology.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

namespace toposched::nodeagent {
namespace {

// The most common non-zero core_count: one unreadable device must not decide the node's shape.
int CommonCoreCount(const Inventory& inventory) {
  std::map<int, int> votes;
  for (const SysfsDevice& device : inventory.devices) {
    if (device.physical_cores > 0) ++votes[device.physical_cores];
  }
  int best = 0;
  int best_votes = 0;
  for (const auto& [cores, count] : votes) {
    if (count > best_votes) {
      best = cores;
      best_votes = count;
    }
  }
  return best;
}

void CompareWithCatalog(const topology::InstanceType& type, const Inventory& inventory,
                        std::vector<std::string>& notes) {
  const int max_index = inventory.devices.back().index;
  if (static_cast<int>(inventory.devices.size()) != type.devices || max_index >= type.devices) {
    std::vector<int> found;
    for (const SysfsDevice& device : inventory.devices) found.push_back(device.index);
    notes.push_back(fmt::format(
        "catalog says {} has {} devices (neuron0..neuron{}) but sysfs lists {}: [{}]; serving the "
        "catalog's devices, those missing stay Unhealthy{}",
        type.name, type.devices, type.devices - 1, found.size(), fmt::join(found, ", "),
        max_index >= type.devices ? "; devices beyond the catalog's count are ignored" : ""));
  }
  for (const SysfsDevice& device : inventory.devices) {
    if (device.index >= type.devices) continue;
    if (device.physical_cores != 0 && device.physical_cores != type.physical_cores_per_device()) {
      notes.push_back(fmt::format(
          "neuron{}: sysfs core_count is {} but the catalog says {} physical cores per device "
          "for {}; using the catalog",
          device.index, device.physical_cores, type.physical_cores_per_device(), type.name));
    }
    if (static_cast<size_t>(device.index) >= type.adjacency.size()) continue;
    const std::vector<int>& expected = type.adjacency[static_cast<size_t>(device.index)];
    // The driver's neighbour order carries no meaning for allocation: compare as sets.
    const std::set<int> want(expected.begin(), expected.end());
    const std::set<int> got(device.connected.begin(), device.connected.end());
    if (want != got) {
      notes.push_back(fmt::format(
          "neuron{}: sysfs connected_devices is [{}] but the catalog says [{}] for {}; using the "
          "catalog",
          device.index, fmt::join(device.connected, ", "), fmt::join(expected, ", "), type.name));
    }
  }
}

}  // namespace

Result<topology::InstanceType> InstanceTypeFromSysfs(const Inventory& inventory,
                                                     const std::string& name) {
  if (inventory.devices.empty()) return Error{"no devices to build a topology from"};
  const int devices = inventory.devices.back().index + 1;
  if (devices > topology::kMaxDevices) {
    return Error{fmt::format("sysfs lists device neuron{}; at most {} devices are supported",
                             devices - 1, topology::kMaxDevices)};
  }
  const int physical = CommonCoreCount(inventory);
  if (physical == 0) return Error{"no device has a readable core_count"};
  const int lnc = inventory.lnc == 0 ? 1 : inventory.lnc;
  if (physical % lnc != 0) {
    return Error{fmt::format("core_count {} is not divisible by LNC {}", physical, lnc)};
  }
  topology::InstanceType type;
  type.name = name.empty() ? "unknown" : name;
  type.devices = devices;
  type.cores_per_device = physical / lnc;
  type.adjacency.assign(static_cast<size_t>(devices), {});
  bool all_to_all = devices > 1;
  for (const SysfsDevice& device : inventory.devices) {
    type.adjacency[static_cast<size_t>(device.index)] = device.connected;
  }
  for (int d = 0; d < devices && all_to_all; ++d) {
    const std::vector<int>& links = type.adjacency[static_cast<size_t>(d)];
    for (int other = 0; other < devices; ++other) {
      if (other != d && std::find(links.begin(), links.end(), other) == links.end()) {
        all_to_all = false;
        break;
      }
    }
  }
  type.rule = all_to_all ? topology::LegalSetRule::kAny : topology::LegalSetRule::kContiguous;
  type.source = "sysfs (instance type not in the catalog)";
  return type;
}

Result<NodeTopology> ResolveTopology(const topology::Catalog& catalog, const Inventory& inventory,
                                     const std::string& instance_type_override) {
  if (inventory.devices.empty()) return Error{"no devices"};
  NodeTopology out;
  const std::string name =
      instance_type_override.empty() ? inventory.instance_type : instance_type_override;
  const topology::InstanceType* known = name.empty() ? nullptr : catalog.Find(name);
  if (known != nullptr) {
    out.type = std::make_unique<topology::InstanceType>(*known);
    out.from_catalog = true;
    CompareWithCatalog(*known, inventory, out.notes);
  } else {
    auto built = InstanceTypeFromSysfs(inventory, name);
    if (!built.ok()) {
      return Error{
          fmt::format("instance type '{}' is not in the catalog and sysfs gives no usable "
                      "topology: {}",
                      name, built.error())};
    }
    out.notes.push_back(fmt::format(
        "instance type '{}' is not in the catalog: using what sysfs reports ({} devices, {} "
        "cores each, rule {}); add it to the catalog for exact rules",
        name.empty() ? "(unreadable)" : name, built->devices, built->cores_per_device,
        topology::RuleName(built->rule)));
    out.type = std::make_unique<topology::InstanceType>(std::move(built).value());
  }

  int lnc = 0;
  if (out.type->has_lnc) {
    lnc = inventory.lnc;  // 0 = the type's default
  } else if (out.from_catalog && inventory.lnc > 1) {
    out.notes.push_back(fmt::format("{} has no LNC setting; ignoring NEURON_LOGICAL_NC_CONFIG={}",
                                    out.type->name, inventory.lnc));
  }
  auto shape = topology::NodeShape::Make(*out.type, lnc);
  if (!shape.ok()) {
    out.notes.push_back(
        fmt::format("{}; using the default LNC {}", shape.error(), out.type->lnc.default_lnc));
    shape = topology::NodeShape::Make(*out.type, 0);
    if (!shape.ok()) return Error{shape.error()};
  }
  out.shape = *shape;
  return out;
}

}  // namespace toposched::nodeagent
