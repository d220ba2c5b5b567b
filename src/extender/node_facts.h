// What the extender knows of a node beyond its name: the instance type, the shared pool it
// reaches, the LNC it runs at, and so how core ids map to devices. Read off the Node object's
// labels and allocatable; the tracker keeps the node's free ids. The LNC and cores per device the
// extender uses are the tracker's (LearnNode copies them back when the tracker keeps a node's
// old shape while pods hold ids on it), so the two never differ.
#ifndef TOPOSCHED_EXTENDER_NODE_FACTS_H_
#define TOPOSCHED_EXTENDER_NODE_FACTS_H_

#include <optional>
#include <string>
#include <vector>

#include "claims/ultraserver.h"
#include "extender/pod_requests.h"
#include "kube/objects.h"
#include "topology/allocator.h"
#include "topology/catalog.h"
#include "topology/pools.h"

namespace toposched::extender {

struct NodeFacts {
  std::string instance_type;
  std::string pool;  // the shared pool it reaches (label), or empty
  int lnc = 0;
  int cores_per_device = 0;  // 0 when the type is unknown
  // Its place in an UltraServer (AWS's labels); empty for an ordinary node or unreadable labels.
  std::optional<claims::UltraServerPlace> ultraserver;
  // Devices its node agent reports out of service (claims::kAnnotationUnhealthyDevices), and
  // what it says of them (kAnnotationUnhealthyWhy, for people).
  topology::DeviceMask out_of_service = 0;
  std::string out_of_service_why;

  // The UltraServer groups a multi-node gang may use this node in (tracker::NodeInfo::groups).
  std::vector<tracker::NodeGroup> Groups() const;
  // The facts the tracker's node depends on (cores_per_device follows from them).
  bool SameNode(const NodeFacts& other) const {
    return instance_type == other.instance_type && lnc == other.lnc && pool == other.pool &&
           out_of_service == other.out_of_service && Groups() == other.Groups();
  }
};

// False for a Node with nothing to learn from, e.g. our own filter answer handed back by
// kube-scheduler (name only).
bool HasFacts(const kube::Node& node);

// Reads the facts; logs a warning when the node advertises fewer devices than its type has, or
// when its UltraServer labels are malformed (it then takes no multi-node gang).
// `pools` may be null (no shared pools configured). The LNC comes only from positive evidence:
// the device plugin's label (claims::kLabelNeuronLnc), else an unambiguous allocatable (the
// node's whole core count at exactly one LNC, with its whole device count), else `previous`'s
// (the facts last known for the node, may be null; for a re-created Node object, the tracker's
// DepartedNode while its pods' holds are parked), else the type's default.
NodeFacts FactsOf(const kube::Node& node, const topology::Catalog& catalog,
                  const topology::PoolSet* pools, const ResourceNames& resources,
                  const NodeFacts* previous = nullptr);

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_NODE_FACTS_H_
