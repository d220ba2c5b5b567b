// The trace-driven simulator: replays a task trace onto a fleet of nodes, once per policy, through
// the production tracker (Reserve + Commit on arrival, Forget on departure) and so the production
// allocator. It only chooses the node for each pod, as kube-scheduler would; the ids on the node
// are always the tracker's choice.
//
// Time is virtual (the trace's creation and deletion times); nothing here reads a clock or a file.
// Deterministic: the same trace, options and seed give the same result. Not thread-safe; one
// Simulate call builds and owns its trackers.
#ifndef TOPOSCHED_SIM_SIMULATOR_H_
#define TOPOSCHED_SIM_SIMULATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "sim/failures.h"
#include "sim/trace.h"
#include "topology/allocator.h"
#include "topology/catalog.h"

namespace toposched::sim {

// A request class as a key of the simulator's and the report's maps: (unit, count), so classes
// sort devices before cores, then by size.
using RequestClassKey = std::pair<int, int>;
inline RequestClassKey ClassKeyOf(const topology::Request& request) {
  return {static_cast<int>(request.unit), request.count};
}

// `count` nodes of one instance type, named "<type>-<k>". With `heads` > 0 the type is a shared
// pool kind (rule aligned, e.g. ipu-pod16): `count` pools "<type>-pool<k>", each reached by
// `heads` head nodes "<type>-pool<k>-head<h>" (docs/pools.md); a pod placed through one head
// takes the devices from every head of that pool.
struct FleetGroup {
  std::string instance_type;
  int count = 0;
  int heads = 0;
};

// Parses "trn1.32xlarge=40,inf2.48xlarge=20,ipu-pod16=2/4" (the last: 2 IPU-PODs of 16, each
// shared by 4 head nodes). The order is the fleet order (first-fit and ties
// take the first node in it). Unknown types are an error naming the type and how to add it.
Result<std::vector<FleetGroup>> ParseFleet(std::string_view spec, const topology::Catalog& catalog);
std::string FormatFleet(const std::vector<FleetGroup>& fleet);

enum class Mode {
  kDynamic,  // arrivals and departures at the trace's times; a pod that does not fit is rejected
  kFill,     // tasks in order, none leave: fill the fleet until it refuses, then keep counting
  // Arrivals at the trace's times; a pod that does not fit waits, as kube-scheduler keeps it
  // Pending, and is tried again whenever a pod leaves; it runs for its trace lifetime from when
  // it starts. See Options and docs/simulator.md ("Queue mode").
  kQueue,
};
std::string_view ModeName(Mode mode);

// The default fleets (docs/simulator.md says why these sizes). Dynamic: one node of each Neuron
// type that takes multi-device requests, 50 devices, below the default trace's peak demand so
// that the busiest hours saturate it. Fill: ten times that, so the first failure comes after
// hundreds of placements rather than a few dozen.
inline constexpr std::string_view kDefaultDynamicFleet =
    "inf2.48xlarge=1,inf2.24xlarge=1,trn1.32xlarge=1,trn2.48xlarge=1";
inline constexpr std::string_view kDefaultFillFleet =
    "inf2.48xlarge=10,inf2.24xlarge=10,trn1.32xlarge=10,trn2.48xlarge=10";
std::string_view DefaultFleet(Mode mode);

struct Options {
  Mode mode = Mode::kDynamic;
  std::vector<FleetGroup> fleet;
  std::vector<topology::Policy> policies;  // run side by side, in this order
  // 0 keeps trace order. Otherwise fill mode shuffles the tasks and dynamic mode shuffles pods
  // that arrive in the same second, deterministically for the seed.
  uint64_t seed = 0;
  // Fill mode: stop at the first failure instead of going on to the end (the end-of-run and
  // rejection totals then cover only what was tried). For comparisons that need only the first
  // failure: the rest of a fill is most of its cost.
  bool stop_at_first_failure = false;
  // Keep the utilization timeline and device maps the HTML report draws.
  bool record_report_data = false;
  // Devices failing and coming back (none by default). With failures on, every policy is also
  // run without them, and the report says what they cost each (docs/simulator.md).
  FailureOptions failures;
  // Queue mode, ours only, the extender's --hold-back-hours (docs/simulator.md, "Letting smaller
  // pods go first"): a pod that has waited less than this does not start while smaller waiting
  // pods that fit now need more devices than its start would leave (tracker::Tracker::HoldsBack).
  // 0 (the default): off, as the extender's default.
  int64_t hold_back_age_ns = 0;
  // Called now and then with the policy being run and the work done so far (of `total`).
  std::function<void(std::string_view policy, int64_t done, int64_t total)> progress;
};

// Why a pod found no node.
// "Eligible" nodes are those whose type could ever grant the request.
enum class RejectReason {
  kNoRoom,      // no eligible node has that many free units, even counted without topology
  kNoLegalSet,  // an eligible node has that many free units, but not as a legal set
  kNeverLegal,  // no node is eligible: no type in the fleet can ever grant that count
};
inline constexpr int kRejectReasons = 3;
std::string_view RejectReasonKey(RejectReason reason);    // "no_room", ...
std::string_view RejectReasonLabel(RejectReason reason);  // "no room on eligible nodes", ...

// One sample of the fleet's state: at a virtual time (dynamic, seconds from the start) or after a
// number of tasks tried (fill).
struct UtilizationPoint {
  double x = 0;
  double allocated_share = 0;
  int rejected = 0;  // pods rejected so far
  int waiting = 0;   // queue mode: pods waiting now
};

// Which pod holds each core of one node at one moment.
struct DeviceMap {
  std::string node;
  std::string instance_type;
  int devices = 0;
  int cores_per_device = 0;
  std::vector<int> core_owner;  // per core: the task's index in the trace, -1 when free
  const topology::InstanceType* type = nullptr;  // how it is drawn; a pool's differs from its count
};

struct PolicyResult {
  topology::Policy policy = topology::Policy::kBestFit;
  int placed = 0;
  int rejected = 0;
  int rejected_by_reason[kRejectReasons] = {};
  std::map<std::string, int> rejected_by_request;  // "2 devices" -> count

  // Dynamic mode.
  double device_hours = 0;              // allocated device-hours; a core is 1/cores_per_device
  double avg_unallocated_share = 0;     // time-weighted over the replay
  double unallocated_when_refused = 0;  // mean unallocated share at refusals for lack of room
  double avg_fragmentation = 0;         // time-weighted, while any device is free
  double peak_allocated_share = 0;
  double peak_at_s = 0;  // seconds from the start

  // Fill mode. "First failure" is the first refusal for lack of room (not a never-legal count).
  bool failed = false;
  int placed_before_first_failure = 0;
  int first_failure_task = -1;        // index in the trace
  std::string first_failure_request;  // e.g. "2 devices"
  double devices_allocated_at_first_failure = 0;
  double unallocated_share_at_first_failure = 0;
  double fragmentation_at_first_failure = 0;

  // Queue mode. Waits are from arrival to start; a pod still waiting at the end is counted in
  // still_waiting (its wait has no end) and left out of the wait statistics.
  int waited = 0;  // pods that did not start at once
  int still_waiting = 0;
  double mean_wait_s = 0;  // over the pods that started
  double p95_wait_s = 0;
  double max_wait_s = 0;
  // Each pod's wait counted once per device it holds (a core 1/cores_per_device of its node's
  // device): an 8-device pod's wait weighs 8 times a 1-device pod's.
  double device_weighted_mean_wait_s = 0;
  // Per request class ("8 devices"), ordered by ClassKeyOf: is any size starved?
  struct ClassWait {
    topology::Request request;
    int pods = 0;  // that started
    double mean_s = 0;
    double p95_s = 0;
    double max_s = 0;
  };
  std::vector<ClassWait> wait_by_request;
  double makespan_s = 0;  // first arrival to last departure (or to the end, with pods waiting)
  double avg_allocated_share = 0;  // time-weighted over the makespan
  // Of all the time pods spent waiting, the share during which enough free units existed on a
  // node that could ever take the pod, only not as a legal set: what fragmentation costs.
  double fragmented_wait_share = 0;

  // Device failures (Options::failures). A pod "hit" held a device when it failed; with evict it
  // was removed then and started again from the beginning (the work it had done is lost).
  int pods_hit = 0;
  int evicted = 0;
  int dropped_after_eviction = 0;  // dynamic mode: evicted, and no node took it again
  double lost_device_hours = 0;    // device-hours evicted pods had run before their eviction

  // Both modes, at the end of the run (dynamic: after the last departure, so usually zero).
  double devices_allocated_at_end = 0;
  double unallocated_share_at_end = 0;
  double fragmentation_at_end = 0;

  // With record_report_data.
  std::vector<UtilizationPoint> timeline;
  std::vector<DeviceMap> device_maps;  // at peak (dynamic) or first failure (fill)
  std::string device_maps_moment;      // words saying when they were taken
};

struct SimResult {
  Mode mode = Mode::kDynamic;
  uint64_t seed = 0;
  std::vector<FleetGroup> fleet;
  int nodes = 0;
  int total_devices = 0;
  int rows = 0;                         // rows read, good and bad
  int gpu_tasks = 0;                    // tasks replayed
  int device_requests = 0;              // of which whole devices
  int core_requests = 0;                // of which cores
  int cpu_only_skipped = 0;             // num_gpu 0: nothing for the accelerator scheduler to do
  int bad_rows = 0;                     // skipped: unreadable, or (dynamic) unusable times
  std::vector<std::string> warnings;    // the first few bad rows
  double span_s = 0;                    // dynamic: first arrival to last departure
  std::vector<std::string> task_names;  // by trace index, for the report's legends
  std::vector<PolicyResult> policies;
  // With Options::failures on: what happened to the devices (the same for every policy), and
  // each policy run again without failures, in the same order as `policies`.
  FailureOptions failures;
  int device_failures = 0;      // fill mode: devices out from the start
  double device_hours_out = 0;  // time modes: device-hours out of service within the replay
  std::vector<PolicyResult> without_failures;
};

// The order fill mode tries tasks in: trace order for seed 0, else a shuffle that depends only on
// the seed.
std::vector<size_t> FillOrder(size_t jobs, uint64_t seed);

// Runs the trace once per policy. Errors (nothing run) on an empty or unknown fleet, no policies,
// or dynamic mode on a trace without time columns.
Result<SimResult> Simulate(const topology::Catalog& catalog, const Trace& trace,
                           const Options& options);

}  // namespace toposched::sim

#endif  // TOPOSCHED_SIM_SIMULATOR_H_
