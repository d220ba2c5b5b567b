// Queue-aware admission: which of the pods waiting now should go first when the fleet cannot
// start them all. Pure like the rest of topology: the caller passes the waiting pods per request
// class and how long this pod has waited (no clock here).
//
// Why: under sustained load the same devices start more pods when smaller ones go first (the
// per-pod wait falls, and small pods stop waiting behind big ones that hold a node for days), but
// a big pod must not wait for ever: after an age it goes in queue order like any other. Off by
// default; on request (--hold-back-hours) the simulator's queue mode and the extender's filter
// apply it through the same tracker::Tracker::HoldsBack (docs/simulator.md, "Letting smaller pods
// go first"; docs/extender.md).
#ifndef TOPOSCHED_TOPOLOGY_QUEUE_H_
#define TOPOSCHED_TOPOLOGY_QUEUE_H_

#include <cstdint>
#include <span>

#include "topology/allocator.h"

namespace toposched::topology {

// One class of the pods waiting now.
struct WaitingClass {
  Request request;
  int pods = 0;       // waiting now
  bool fits = false;  // some node would take one of them now
};

// The age the packing matrix favoured (docs/benchmarks.md, "Letting smaller pods go first"):
// what `toposched simulate --hold-back-hours` suggests.
inline constexpr int64_t kHoldBackAgeNs = int64_t{24} * 3600 * 1'000'000'000;

// A request's size for queue order, in devices; a core counts as half a device (the order only
// needs "smaller", and every Neuron type has 2 to 8 cores per device).
double QueueSize(const Request& request);

// What HoldsBack decided, with the numbers a refusal names.
struct HoldBack {
  bool held = false;
  int smaller_pods = 0;        // waiting in smaller classes that fit now
  double smaller_devices = 0;  // what they need (QueueSize)
  double free_devices = 0;     // the fleet's, as given
};

// Whether a pod asking `request`, waiting `waited_ns`, should not start now: it has waited less
// than `age_ns`, the fleet has the devices to start it, and the pods waiting of smaller classes
// that fit now need more devices than its start would leave free (`free_devices`: the fleet's, a
// core counting as its share of a device).
HoldBack HoldsBack(const Request& request, int64_t waited_ns, std::span<const WaitingClass> waiting,
                   double free_devices, int64_t age_ns);

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_QUEUE_H_
