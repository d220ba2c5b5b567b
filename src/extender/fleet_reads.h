// What the operators' views (fleet_view.cc) and the fleet history's sampler (fleet_sample.cc)
// both read from the tracker, with one home: the batched read of nodes, why a pod is not placed
// on a node (one word per node), and the fleet's allocated share.
#ifndef TOPOSCHED_EXTENDER_FLEET_READS_H_
#define TOPOSCHED_EXTENDER_FLEET_READS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "topology/demand.h"
#include "topology/node_state.h"
#include "tracker/tracker.h"

namespace toposched::extender {

// Nodes read per shared lock of the tracker: a bind's exclusive lock waits for one batch at most.
inline constexpr size_t kViewBatch = 256;

// The named nodes' views, read kViewBatch nodes per shared lock of the tracker; `holders`: as
// Tracker::NodeViews.
std::vector<tracker::NodeView> ViewsInBatches(const tracker::Tracker& tracker,
                                              std::span<const std::string> names,
                                              bool holders = true);

// Why a pod is not placed on a node, as one word an operator can filter by (docs/observability.md),
// from the closest to a placement to the farthest: what the fleet history counts a pending pod
// as is the closest kind any node gives it.
inline constexpr std::array<std::string_view, 6> kWhyKinds = {
    "fits",                // a legal set is free now
    "no-legal-set",        // enough free units, but no legal set among the free ids
    "too-few-free",        // fewer free units than the pod needs at once
    "reserved-for-gang",   // a multi-node gang holds the node
    "never-on-this-type",  // no state of the node could serve it
    "not-managed",         // the DRA driver manages the node
};
// The index of `kind` in kWhyKinds (kWhyKinds.size() for a word not there).
size_t WhyKindIndex(std::string_view kind);

// The word for `pod` on `node`, from the node's state beside filter's verdict `fit` (whose
// sentence is filter's own: one home).
std::string_view WhyKind(const tracker::NodeView& node, const tracker::PodSpec& pod,
                         const tracker::FitResult& fit);

// Per request class of `costs` (index-aligned): the legal sets of it free on the node now, or
// nullopt when the node's type can never serve it. What the views and the history show per node.
std::vector<std::optional<int64_t>> FreeSetsPerClass(const topology::NodeShape& shape,
                                                     const topology::NodeUsage& usage,
                                                     const topology::SlotCosts& costs);

// FreeSetsPerClass and topology::ExpectedFragmentation of nodes, worked out once per node state
// (topology::NodeStateKey) within one read of the fleet: nodes in the same state (empty ones, full
// ones, ones running the same workload) share the answer, and both walk every legal set. One per
// read, owned by its thread: nothing shared, no lock. Keeps pointers to the shapes and usages it
// is asked about, which must outlive it (the read's views).
class NodeFreeMemo {
 public:
  struct Answer {
    std::vector<std::optional<int64_t>> sets;  // FreeSetsPerClass
    double fragmentation = 0;                  // ExpectedFragmentation, as it is (may be NaN)
  };

  explicit NodeFreeMemo(const topology::SlotCosts& costs) : costs_(costs) {}

  // Valid as long as the memo.
  const Answer& Of(const topology::NodeShape& shape, const topology::NodeUsage& usage);

 private:
  const topology::SlotCosts& costs_;
  std::unordered_map<topology::NodeStateKey, Answer, topology::NodeStateHash, topology::NodeStateEq>
      answers_;
};

// Devices and free capacity added up over nodes (cores counted as their share of a device).
struct CapacityTally {
  int64_t devices = 0;
  int64_t free_units = 0;  // topology::kUnitsPerDevice per device
  int64_t all_units = 0;

  void Add(const tracker::NodeView& node);
  // 0-1: the share of the devices held (0 with no devices).
  double AllocatedShare() const;
  // Devices held, cores as their share of a device.
  double AllocatedDevices() const;
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_FLEET_READS_H_
