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

// A node's state as fitting sees it (its shape and which cores are used), for answering nodes in
// the same state once: big clusters have many (empty ones, full ones, ones running the same
// workload), and fitting is most of the cost of a query over thousands of nodes.
struct NodeStateKey {
  const topology::NodeShape* shape;
  const topology::NodeUsage* usage;
};
struct NodeStateHash {
  size_t operator()(const NodeStateKey& k) const {
    // The first 64 cores tell most states apart and cost one word to read; equality compares all.
    const uint64_t low = (k.usage->used_cores() & topology::CoreBits(~uint64_t{0})).to_ullong();
    return std::hash<uint64_t>()(low * 0x9E3779B97F4A7C15ULL ^
                                 reinterpret_cast<uintptr_t>(k.shape->type)) +
           static_cast<size_t>(k.shape->cores_per_device);
  }
};
struct NodeStateEq {
  bool operator()(const NodeStateKey& a, const NodeStateKey& b) const {
    return a.shape->type == b.shape->type &&
           a.shape->cores_per_device == b.shape->cores_per_device &&
           a.usage->used_cores() == b.usage->used_cores();
  }
};

// True if any set of `a` shares a core with any set of `b`.
bool Overlaps(const topology::NodeShape& shape, const PodAllocation& a, const PodAllocation& b);

}  // namespace toposched::tracker

#endif  // TOPOSCHED_TRACKER_FITTING_H_
