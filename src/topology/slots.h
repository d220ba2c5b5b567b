// Internal to topology/: counting the free legal sets ("slots") of a request on one node, and the
// scarcity cost of a change as the slots it takes from each expected request class (demand.h).
#ifndef TOPOSCHED_TOPOLOGY_SLOTS_H_
#define TOPOSCHED_TOPOLOGY_SLOTS_H_

#include <cstdint>

#include "topology/allocator.h"

namespace toposched::topology {

struct SlotCosts;  // topology/demand.h

// What slot counting reads: the free devices as a mask and, on nodes of up to 64 cores (every
// Neuron type at its default LNC), the free cores as one word; larger nodes keep a bitset.
struct FreeState {
  DeviceMask devices = 0;
  uint64_t cores = 0;   // when small
  CoreBits wide_cores;  // when !small
  bool small = true;
};

FreeState FreeOf(const NodeShape& shape, const NodeUsage& usage);
int FreeCoreCount(const FreeState& f);
// Takes a set out of a FreeState: a device set (mask) or a core range [start, start+count).
void TakeFrom(const NodeShape& shape, FreeState& f, DeviceMask devices, int core_start,
              int core_count);
// The free legal sets of `request` in `f`, disjoint.
int SlotsIn(const NodeShape& shape, const FreeState& f, const Request& request);
// The cost of going from `before` to `after` on one node.
double CostBetween(const NodeShape& shape, const FreeState& before, const FreeState& after,
                   const SlotCosts& costs);

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_SLOTS_H_
