// The node's topology as the plugin uses it: the catalog's entry for the instance type the DMI
// reports (checked against what sysfs says, mismatches logged with both), or, for a type the
// catalog does not know, one built from sysfs itself.
#ifndef TOPOSCHED_NODEAGENT_NODE_TOPOLOGY_H_
#define TOPOSCHED_NODEAGENT_NODE_TOPOLOGY_H_

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "nodeagent/sysfs.h"
#include "topology/allocator.h"
#include "topology/catalog.h"

namespace toposched::nodeagent {

struct NodeTopology {
  // Owned so that `shape.type` stays valid however the catalog or this struct moves.
  std::unique_ptr<topology::InstanceType> type;
  topology::NodeShape shape;
  bool from_catalog = false;
  // Differences between the catalog and sysfs, and the choices made about them.
  std::vector<std::string> notes;
};

// `instance_type_override` (from a flag) replaces the DMI name when non-empty. Errors only when no
// usable shape exists (e.g. more than 64 devices, or an LNC the type does not allow and no
// fallback).
Result<NodeTopology> ResolveTopology(const topology::Catalog& catalog, const Inventory& inventory,
                                     const std::string& instance_type_override = {});

// The instance type built from sysfs alone: devices 0..max index, cores per device from
// core_count / LNC, rule `any` when every device links to every other, else `contiguous`.
Result<topology::InstanceType> InstanceTypeFromSysfs(const Inventory& inventory,
                                                     const std::string& name);

}  // namespace toposched::nodeagent

#endif  // TOPOSCHED_NODEAGENT_NODE_TOPOLOGY_H_
