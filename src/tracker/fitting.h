// Multi-container fitting: where a whole pod's containers would go on one node in a given state.
// Pure functions of the node's shape and usage, no tracker state; internal to toposched_tracker
// (callers use Tracker::Fit and friends).
#ifndef TOPOSCHED_TRACKER_FITTING_H_
#define TOPOSCHED_TRACKER_FITTING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "topology/allocator.h"
#include "topology/demand.h"
#include "topology/node_state.h"
#include "tracker/tracker.h"

namespace toposched::tracker {

// Why a node the tracker does not have cannot take a pod.
std::string UnknownNodeReason(std::string_view node);

// A failed fit for such a node.
FitResult UnknownNodeFit(std::string_view node);

// Places every container of the pod on one node. App containers each get their own set (largest
// first, which packs better); each init container reuses the app containers' ids when a legal
// set lies inside them, or else takes more. With `with_ids` false a one-container pod's answer
// carries only the verdict and score (no allocation to build and free: filter asks this for
// thousands of nodes per call). The result's allocation names no node.
FitResult FitOnUsage(const topology::NodeShape& shape, topology::NodeUsage usage,
                     const PodSpec& pod, Policy policy, bool with_ids,
                     const topology::SlotCosts* costs);

// A node's state as fitting sees it, for answering nodes in the same state once
// (topology/node_state.h).
using topology::NodeStateEq;
using topology::NodeStateHash;
using topology::NodeStateKey;

// True if any set of `a` shares a core with any set of `b`.
bool Overlaps(const topology::NodeShape& shape, const PodAllocation& a, const PodAllocation& b);

}  // namespace toposched::tracker

#endif  // TOPOSCHED_TRACKER_FITTING_H_
