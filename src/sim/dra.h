// A model of a DRA cluster, for measuring the one lever a DRA driver has over packing: the order
// it publishes its devices in (dra/slices.h). kube-scheduler's DRA allocator has no scoring: on a
// node it takes the first published device that matches the claim and is free. So each pod here
// goes to the first node (in the scheduler's node order) where such a device exists, and takes
// that device; which device is first is the driver's publish order on that node:
//   * index    — a naive driver: whole devices, then sets by size and first id (AWS's lowest-index
//                choice, what first-fit gives);
//   * scarcity — ours: each node's plugin orders its offers by what they take from the requests
//                it has seen (dra::NodeLocalCosts: its own node only, as a kubelet plugin sees it),
//                re-published after every claim it prepares.
// The node order is the scheduler's, which DRA does not steer: fleet order (first-fit) or the
// least-allocated node first (spread). Two replays: fill (tasks in order until the fleet refuses)
// and dynamic (arrivals and departures at the trace's times; a pod no node can take is refused,
// as --mode dynamic counts it), where departures leave holes and the order decides which hole a
// claim breaks.
#ifndef TOPOSCHED_SIM_DRA_H_
#define TOPOSCHED_SIM_DRA_H_

#include <string>
#include <vector>

#include "base/result.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "topology/catalog.h"

namespace toposched::sim {

struct DraVariant {
  bool scarcity_order = false;  // else index order
  bool spread_nodes = false;    // else fleet order
  std::string Name() const;     // "index/first-node", "scarcity/spread", ...
};

struct DraResult {
  DraVariant variant;
  bool failed = false;
  int placed_before_first_failure = 0;
  std::string first_failure_request;  // e.g. "2 devices"
  double unallocated_share_at_first_failure = 0;
  int never_legal = 0;  // pods no node of the fleet could ever take (not a failure)
  // Dynamic replay only.
  int placed = 0;
  int refused = 0;          // for lack of a free matching device on every node
  double device_hours = 0;  // a core counts as 1/cores_per_device of its device
};

// Every variant, over the same task order (FillOrder(seed)).
Result<std::vector<DraResult>> SimulateDraFill(const topology::Catalog& catalog, const Trace& trace,
                                               const std::vector<FleetGroup>& fleet, uint64_t seed);

// Every variant, replaying arrivals and departures at the trace's times (tasks without usable
// times are skipped). Same-second arrivals keep trace order.
Result<std::vector<DraResult>> SimulateDraDynamic(const topology::Catalog& catalog,
                                                  const Trace& trace,
                                                  const std::vector<FleetGroup>& fleet);

// The results as a table for people, and as one JSON object ({"dra":[...]}).
std::string FormatDraTable(const std::vector<DraResult>& results, std::string_view trace_name,
                           std::string_view fleet, Mode mode);
std::string FormatDraJson(const std::vector<DraResult>& results);

}  // namespace toposched::sim

#endif  // TOPOSCHED_SIM_DRA_H_
