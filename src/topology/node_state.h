// A node's state as fitting sees it (its shape and which cores are used), for answering nodes in
// the same state once: big clusters have many (empty ones, full ones, ones running the same
// workload), and fitting is most of the cost of a query over thousands of nodes. One home for the
// tracker's fits and the extender's fleet views (free sets, fragmentation).
#ifndef TOPOSCHED_TOPOLOGY_NODE_STATE_H_
#define TOPOSCHED_TOPOLOGY_NODE_STATE_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "topology/allocator.h"

namespace toposched::topology {

// Points at a shape and a usage: they must outlive the key.
struct NodeStateKey {
  const NodeShape* shape;
  const NodeUsage* usage;
};
struct NodeStateHash {
  size_t operator()(const NodeStateKey& k) const {
    // The first 64 cores tell most states apart and cost one word to read; equality compares all.
    const uint64_t low = (k.usage->used_cores() & CoreBits(~uint64_t{0})).to_ullong();
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

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_NODE_STATE_H_
