// Internal to topology/: scarcity's set choice, built on counting the free legal sets ("slots")
// of a request on one node and the cost of a change as the slots it takes from each expected
// request class (demand.h). FreeSlots and PlacementCost, its public faces, are declared in
// allocator.h and demand.h.
#ifndef TOPOSCHED_TOPOLOGY_SLOTS_H_
#define TOPOSCHED_TOPOLOGY_SLOTS_H_

#include <cstdint>

#include "topology/allocator.h"

namespace toposched::topology {

struct SlotCosts;  // topology/demand.h

// Scarcity's set choice: among best-fit's choice (`chosen`) and a few other free legal sets, the
// one that costs the expected demand least (`costs`); best-fit's choice wins ties, so with no
// demand to protect nothing changes. Sets chosen.cost. In this file with slot counting, which it
// calls for every candidate and every demand class.
Decision ChooseByCost(const NodeShape& shape, const NodeUsage& usage, const Request& req,
                      Decision chosen, const SlotCosts& costs);

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_SLOTS_H_
