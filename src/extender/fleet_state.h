// What the operators' views show, gathered once (ExtenderService::CollectFleet) and written as
// JSON (fleet_view.cc) or as the fleet page (fleet_page.cc): one home for what the views say.
#ifndef TOPOSCHED_EXTENDER_FLEET_STATE_H_
#define TOPOSCHED_EXTENDER_FLEET_STATE_H_

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "extender/fleet_reads.h"
#include "extender/pod_requests.h"
#include "topology/demand.h"
#include "tracker/tracker.h"

namespace toposched::extender {

// One kind of reason a pending pod is not placed (docs/observability.md): how many nodes, and the
// first node's name and filter's own sentence for it.
struct WhyExample {
  int nodes = 0;
  std::string node;
  std::string reason;
};

struct PendingPod {
  PodRequests pod;
  bool explained = false;                   // within FleetQuery::explain_pending
  std::map<std::string, WhyExample> kinds;  // kind -> nodes; when explained
  std::string held_back;  // when explained: why filter lets smaller pods go first, or empty
};

struct FleetState {
  std::vector<tracker::NodeView> views;  // sorted by name; filtered by the query
  // Nodes filter does not offer (the DRA driver manages them), name -> reason, and their types.
  std::vector<std::pair<std::string, std::string>> not_offered;
  std::unordered_map<std::string, std::string> not_offered_types;
  topology::SlotCosts costs;
  std::vector<int64_t> supply;  // free sets per request class of `costs`, fleet-wide
  std::vector<PendingPod> pending;
  std::map<std::string, const topology::InstanceType*> types;  // the types of the nodes shown
  int64_t devices = 0;
  double allocated_share = 0;  // of the shown nodes' units
};

// "reserved", "committed", "releasing".
std::string_view HoldStateName(tracker::HoldState state);
// Calls fn(device) for each device a placement touches (a core placement's devices, once each),
// without building a list: the fleet view asks this for every hold.
template <typename Fn>
void ForEachDeviceOf(const topology::NodeShape& shape, const topology::Placement& placement,
                     Fn&& fn) {
  if (placement.unit == topology::Unit::kDevice) {
    for (int d : placement.ids) fn(d);
    return;
  }
  bool any = false;
  int last = 0;
  for (int core : placement.ids) {
    const int device = shape.cores_per_device > 0 ? core / shape.cores_per_device : -1;
    if (any && last == device) continue;
    any = true;
    last = device;
    fn(device);
  }
}
// The same as a list.
std::vector<int> DevicesOf(const topology::NodeShape& shape, const topology::Placement& placement);

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_FLEET_STATE_H_
