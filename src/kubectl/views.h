// The extender's operators' views (docs/observability.md: kind FleetView from GET /v1/fleet,
// kind PodPlacement from GET /v1/why) read back into structs for `kubectl neuron` to draw. The
// text comes over the network from a process the plugin does not control, so it is untrusted:
// read with the project's JSON reader (base/json_reader.h), never throwing, bounded, and every
// refusal names the JSON path of the bad value. Fields the views add within v1 are skipped.
#ifndef TOPOSCHED_KUBECTL_VIEWS_H_
#define TOPOSCHED_KUBECTL_VIEWS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace toposched::kubectl {

inline constexpr std::string_view kApiVersion = "toposched.io/v1";

struct HoldView {
  std::string pod;  // namespace/name
  std::string uid;
  std::string container;
  std::string state;  // reserved, committed, releasing
  std::string unit;   // device or core
  std::vector<int> ids;
  bool gang_seat = false;
};

struct UnitView {
  int device = 0;
  int cores_used = 0;
  std::vector<int> holds;  // indexes into NodeView::holds (checked in range)
};

struct NodeView {
  std::string name;
  std::string instance_type;
  std::string pool;
  std::string reserved_for_gang;
  std::string error;        // an unknown instance type
  std::string managed_by;   // "dra" for a node the DRA driver hands out
  std::string not_offered;  // filter's reason for such a node
  int lnc = 0;
  int devices = 0;
  int cores_per_device = 0;
  std::vector<HoldView> holds;
  std::vector<UnitView> units;
  std::vector<int> free_devices;
  std::vector<int> out_of_service;  // failed devices, as the node's agent reported them
  int64_t free_cores = 0;
  std::vector<std::pair<std::string, int64_t>> free_sets;  // request class -> sets, in order
  double fragmentation = 0;
};

struct ClassView {
  std::string request;
  double share = 0;
  int64_t free_sets = 0;
  double cost_per_set = 0;
};

struct TypeView {
  std::string name;
  int devices = 0;
  std::string rule;
  std::vector<int> sizes;
  std::vector<std::vector<int>> adjacency;
};

struct RequestView {
  std::string container;
  bool init = false;
  std::string request;  // "4 devices"
};

struct WhyKindView {
  std::string kind;
  int64_t nodes = 0;
  std::string example_node;
  std::string example_reason;
};

struct PendingView {
  std::string pod;
  std::string uid;
  std::string gang;
  std::vector<RequestView> requests;
  std::vector<WhyKindView> why;  // empty when not explained
};

struct FleetView {
  bool ready = false;
  std::string policy;
  int64_t summary_nodes = 0;
  int64_t summary_devices = 0;
  double allocated_share = 0;
  int64_t pending_pods = 0;
  std::vector<ClassView> classes;
  std::vector<TypeView> instance_types;
  std::vector<NodeView> nodes;
  std::vector<PendingView> pending;

  const TypeView* Type(std::string_view name) const;
};

struct NodeWhyView {
  std::string node;
  std::string instance_type;
  std::string kind;
  std::string reason;
};

struct PodPlacementView {
  std::string pod;
  std::string uid;
  std::string gang;
  std::vector<RequestView> requests;
  // A pod that holds ids: its node, the hold's state and each container's ids.
  std::string node;
  std::string state;
  std::vector<HoldView> allocation;  // pod, uid and state left empty
  // A waiting pod: how many nodes fit, and per node why not.
  int64_t nodes_that_fit = 0;
  std::vector<NodeWhyView> nodes;
};

// Each refuses text that is not JSON, a document of another apiVersion or kind, a value of the
// wrong type, an id outside [0, topology::kMaxCores) or a unit's hold index outside its node's
// holds, and more than the limits below (a fleet of 100,000 nodes; 4096 holds on one node).
Result<FleetView> ParseFleetView(std::string_view json);
Result<PodPlacementView> ParsePodPlacement(std::string_view json);

}  // namespace toposched::kubectl

#endif  // TOPOSCHED_KUBECTL_VIEWS_H_
