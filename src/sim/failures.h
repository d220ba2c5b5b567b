// Device failures in the simulator: when each device of the fleet fails and when it is back,
// drawn once per simulation from the seed, so that every policy meets the same failures. Pure:
// no clock, no I/O; the same options and seed give the same schedule.
#ifndef TOPOSCHED_SIM_FAILURES_H_
#define TOPOSCHED_SIM_FAILURES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/result.h"
#include "topology/allocator.h"

namespace toposched::sim {

// What --device-failure-rate, --device-repair-hours and --on-device-failure ask for.
struct FailureOptions {
  // Mean failures per device per day (each device fails as a Poisson process); 0: none.
  double per_device_day = 0;
  // Mean hours a failed device stays out of service (exponential), before it is back.
  double repair_hours = 24;
  // What happens to a pod holding a device that fails, as the extender's --on-device-failure:
  // false ("event") it keeps its devices until it ends; true ("evict") it is removed at once and
  // starts again from the beginning, wherever it fits (queue mode: it waits again).
  bool evict = false;
  bool enabled() const { return per_device_day > 0; }
};

// One device failing (`fails`) or coming back.
struct DeviceOutage {
  int64_t t_ns = 0;
  size_t node = 0;  // index in the fleet
  int device = 0;
  bool fails = true;
};

// Above this many outages a schedule is refused (the rate is surely a mistake: a million
// failures is years of a large fleet).
inline constexpr size_t kMaxOutages = 10'000'000;

// Every failure and return from `start_ns` to `end_ns`, time order (ties: node, device, a
// return before a failure). `devices_per_node[i]` devices of node i may fail; 0 for a node
// whose devices are not its own (a shared pool's head). Errors when over kMaxOutages.
Result<std::vector<DeviceOutage>> OutageSchedule(const std::vector<int>& devices_per_node,
                                                 int64_t start_ns, int64_t end_ns,
                                                 const FailureOptions& options, uint64_t seed);

// Fill mode has no time: the devices out of service at one moment of the steady state, per node
// (each device is out with the long-run share rate x repair / (1 + rate x repair)).
std::vector<topology::DeviceMask> SteadyOutages(const std::vector<int>& devices_per_node,
                                                const FailureOptions& options, uint64_t seed);

// The long-run share of devices out of service for these options.
double SteadyOutShare(const FailureOptions& options);

}  // namespace toposched::sim

#endif  // TOPOSCHED_SIM_FAILURES_H_
