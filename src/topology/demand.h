// Scarcity-aware placement: what the workload is expected to ask for next, how many more of each
// kind of request a node could still take, and what a candidate placement costs the requests
// still to come. Pure like the rest of topology: no I/O, no clock.
//
// The idea is FGD's (Weng et al., ATC'23, "fragmentation gradient descent"): score a placement by
// how much it lowers the capacity left for the requests the workload is expected to send, each
// weighted by how often it comes. What FGD weighs one node at a time we weigh fleet-wide: losing a
// slot of a request class costs more when the fleet has few such slots left. A 2-device request
// can only ever land on an Inferentia ring, so a 1-device pod that takes a ring position on inf2
// costs more than one that takes a Trainium device whose 4-row is already broken, even though
// both nodes "pack" the same. See docs/topology.md, "Scarcity-aware scoring".
#ifndef TOPOSCHED_TOPOLOGY_DEMAND_H_
#define TOPOSCHED_TOPOLOGY_DEMAND_H_

#include <cstdint>
#include <span>
#include <vector>

#include "topology/allocator.h"

namespace toposched::topology {

// The expected mix of requests, learned online. Each observation is one request (a container of
// a pod that asked); older observations fade by a factor (1 - 1/window) per new one, so the model
// follows a workload that changes. Before anything is observed a prior stands in for it: a
// Neuron-typical mix of 1/2/4/8/16 devices and 1/2 cores, worth `prior_weight` observations, which
// fades like any other observation. Not thread-safe: its owner (the tracker) locks.
class DemandModel {
 public:
  struct Entry {
    Request request;
    double weight = 0;
  };
  // At most this many classes are tracked; a new class displaces the lightest one.
  static constexpr int kMaxClasses = 16;
  static constexpr double kDefaultWindow = 2000;
  static constexpr double kDefaultPriorWeight = 20;

  explicit DemandModel(double window = kDefaultWindow, double prior_weight = kDefaultPriorWeight);

  void Observe(const Request& request);

  // In a stable order: a class keeps its index until it is displaced.
  const std::vector<Entry>& classes() const { return classes_; }
  // Bumped whenever a class is added or displaced (weights alone change every observation).
  uint64_t generation() const { return generation_; }
  int64_t observed() const { return observed_; }
  double total_weight() const;

 private:
  double decay_;
  std::vector<Entry> classes_;
  uint64_t generation_ = 0;
  int64_t observed_ = 0;
};

// Free capacity in fractions of a device: a core is kUnitsPerDevice / cores_per_device units, a
// whole number for every core size up to 8 per device.
inline constexpr int64_t kUnitsPerDevice = 840;
inline int64_t UnitsPerCore(const NodeShape& shape) {
  return shape.cores_per_device > 0 ? kUnitsPerDevice / shape.cores_per_device : 0;
}
int64_t FreeUnits(const NodeShape& shape, const NodeUsage& usage);

// What losing one free slot of each demand class costs now, given the fleet's supply of slots
// for it (the sum of FreeSlots over every node). Index-aligned with DemandModel::classes().
// Capacity itself is one more thing every request needs: a pod that takes fewer device-fractions
// (a core of a 4-core device rather than of a 2-core one) leaves more for all of them.
struct SlotCosts {
  std::vector<Request> classes;
  std::vector<double> per_slot;
  std::vector<double> shares;  // each class's share of the expected requests (FGD's weights)
  double per_unit = 0;         // per unit of free capacity taken (kUnitsPerDevice units = 1 device)

  // share_r / supply_r^2: the marginal change of sum_r share_r / supply_r, a barrier that grows
  // as any class's remaining homes run out; classes the fleet can never serve cost nothing.
  // Capacity counts as a class of share 1 whose supply is the fleet's free units.
  static SlotCosts From(const DemandModel& demand, std::span<const int64_t> supply,
                        int64_t free_units);
};

// FGD's measure (Weng et al., ATC'23, §4), mapped from GPUs to Neuron units: for each expected
// request class, the free units of the node that no free legal set of that class can use (all of
// them when the class does not fit at all), weighted by the class's share and summed; in
// devices (a core is its share of a device). The node whose measure grows least is FGD's choice.
double ExpectedFragmentation(const NodeShape& shape, const NodeUsage& usage,
                             const SlotCosts& costs);

// The cost of going from `before` to `after` on one node: the slots each class loses and the
// capacity taken, weighted.
double PlacementCost(const NodeShape& shape, const NodeUsage& before, const NodeUsage& after,
                     const SlotCosts& costs);

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_DEMAND_H_
