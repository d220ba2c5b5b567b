#include "extender/node_facts.h"

#include <spdlog/spdlog.h>

#include "claims/keys.h"

namespace toposched::extender {
namespace {

// The LNC a Trn2 node runs at, read off the core count its device plugin advertises.
int LncFromAllocatable(const topology::InstanceType& type, const kube::Node& node,
                       const ResourceNames& names) {
  if (!type.has_lnc) return 0;
  for (const auto& resource : names.core) {
    auto it = node.allocatable.find(resource);
    if (it == node.allocatable.end()) continue;
    for (int lnc : type.lnc.allowed) {
      if (it->second == int64_t{type.devices} * (type.lnc.physical_cores_per_device / lnc)) {
        return lnc;
      }
    }
  }
  return type.lnc.default_lnc;
}

}  // namespace

std::vector<tracker::NodeGroup> NodeFacts::Groups() const {
  std::vector<tracker::NodeGroup> groups;
  if (!ultraserver) return groups;
  for (int nodes : {2, 4}) {
    if (ultraserver->Supports(nodes)) {
      groups.push_back({nodes, ultraserver->GroupId(nodes), ultraserver->NodeId(nodes)});
    }
  }
  return groups;
}

bool HasFacts(const kube::Node& node) {
  return !node.resource_version.empty() || !node.labels.empty() || !node.allocatable.empty();
}

NodeFacts FactsOf(const kube::Node& node, const topology::Catalog& catalog,
                  const topology::PoolSet* pools, const ResourceNames& resources) {
  NodeFacts facts;
  facts.instance_type = node.instance_type;
  if (auto place = claims::UltraServerPlaceOf(node.labels); place.ok()) {
    facts.ultraserver = std::move(place).value();
  } else {
    spdlog::warn("node {}: {}; it takes no multi-node gang until its labels are fixed", node.name,
                 place.error());
  }
  if (auto label = node.labels.find(claims::kPoolLabel); label != node.labels.end()) {
    facts.pool = label->second;
    // The node's accelerators are the pool's; its own instance type does not matter here.
    if (const topology::PoolDef* def = pools != nullptr ? pools->Find(facts.pool) : nullptr) {
      facts.cores_per_device = def->shape_type->cores_per_device;
    }
  } else if (const auto* type = catalog.Find(node.instance_type)) {
    facts.lnc = LncFromAllocatable(*type, node, resources);
    auto shape = topology::NodeShape::Make(*type, facts.lnc);
    if (shape.ok()) facts.cores_per_device = shape->cores_per_device;
    for (const auto& resource : resources.device) {
      auto it = node.allocatable.find(resource);
      if (it != node.allocatable.end() && it->second < type->devices) {
        // kube-scheduler's own count check against allocatable still applies; say why it bites.
        spdlog::warn(
            "node {} ({}) advertises {} of {} {}: some devices are unhealthy or not "
            "registered yet",
            node.name, node.instance_type, it->second, type->devices, resource);
      }
    }
  }
  return facts;
}

}  // namespace toposched::extender
