// Gangs on a fleet of Trn2 UltraServers: multi-node jobs (2 or 4 pods, one per node, in one 2-node
// half or one whole 4-node UltraServer) mixed with single-node pods, placed two ways over the same
// stream, each with its own production tracker:
//
//  * all-or-nothing: the first member to arrive reserves a seat for every member at once
//    (Tracker::ReserveGang); the members are seated and bound as they arrive (SeatGangMember,
//    CommitGangMember). A gang that does not fit whole holds nothing and waits in a FIFO queue,
//    retried whenever pods leave.
//  * pod-by-pod: what kube-scheduler does with AWS's affinity rules (pod affinity on the
//    UltraServer's server id, anti-affinity against other jobs' workers): each member is placed
//    alone when it arrives, on a node of the gang's own group once one member is placed; a member
//    that finds no node waits and is retried whenever pods leave; placed members keep their nodes
//    until the whole gang has run. The gang runs only once every member is placed.
//
// Single pods are placed the same way under both (the tracker's ranking, Reserve + Commit), and
// are rejected, not queued, when nothing fits (as in `simulate --mode dynamic`).
//
// Virtual time only; no clock, no I/O. Deterministic for a stream (and so for a seed).
#ifndef TOPOSCHED_SIM_GANGS_H_
#define TOPOSCHED_SIM_GANGS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "topology/allocator.h"
#include "topology/catalog.h"

namespace toposched::sim {

// One job of the stream: a gang of `size` (2 or 4) pods, or a single pod (size 1).
struct GangJob {
  int size = 1;
  int devices = 16;                 // per pod (whole devices)
  std::vector<int64_t> arrival_ns;  // per member, ascending (a single pod: one)
  int64_t duration_ns = 0;          // how long it runs once every member is placed
};

// The generated stream (GenerateGangStream). Weights are relative.
struct GangMix {
  double four_node = 10;     // gangs of 4 nodes: one whole UltraServer
  double two_node = 15;      // gangs of 2 nodes: one half of an UltraServer
  double single = 75;        // single-node pods
  double member_half = 0.3;  // share of gangs whose members ask 8 devices (else 16)
  // Single pods' sizes (devices; the legal trn2 counts) and weights.
  std::vector<std::pair<int, double>> single_sizes = {{1, 40}, {4, 25}, {8, 20}, {16, 15}};
  double gang_mean_hours = 3;    // exponential run time of a gang
  double single_mean_hours = 1;  // and of a single pod
  double spread_s = 30;          // a gang's members arrive uniformly over this many seconds
};

struct GangSimOptions {
  int ultraservers = 32;  // each 4 trn2u.48xlarge nodes, "us<k>-n<i>"
  int plain_nodes = 0;    // trn2.48xlarge nodes outside any UltraServer, "trn2-<k>"
  int jobs = 5000;        // jobs generated (gangs and single pods)
  // Offered load: the mean device demand of the stream (device-hours per hour) as a share of
  // the fleet's devices; sets the mean gap between arrivals.
  double load = 0.85;
  uint64_t seed = 1;
  // A gang partly placed, with a member waiting for a node, for longer than this in all counts
  // as deadlocked. Also how long an all-or-nothing reservation waits for its next member.
  int64_t timeout_s = 600;
  GangMix mix;
  topology::Policy policy = topology::Policy::kScarcity;
  // Tests: this stream instead of a generated one (arrivals need not be sorted across jobs).
  std::vector<GangJob> stream;
};

// Generates `options.jobs` jobs: Poisson arrivals (the mean gap set by the load), exponential
// run times, each gang's members spread uniformly over `mix.spread_s` after the first. Only the
// raw output of std::mt19937_64 is used (the standard fixes it), so a seed gives the same
// stream with any standard library.
std::vector<GangJob> GenerateGangStream(const GangSimOptions& options, int fleet_devices);

struct WaitStats {
  int gangs = 0;
  double mean_s = 0;
  double p95_s = 0;
  double max_s = 0;
};

// What happened to one gang under one strategy.
struct GangOutcome {
  int job = 0;  // index in the stream
  int size = 0;
  bool completed = false;   // every member placed (always, by the end of the replay)
  double wait_s = 0;        // first member's arrival to the last member placed
  double stuck_s = 0;       // partly placed with an arrived member waiting for a node
  bool deadlocked = false;  // stuck_s > timeout
};

struct GangStrategyResult {
  std::string name;  // "all-or-nothing", "pod-by-pod"
  int gangs = 0;
  int gangs_completed = 0;
  int gangs_deadlocked = 0;
  int gangs_stuck = 0;  // ever partly placed with a member waiting for a node, however briefly
  // Node-hours held by placed members of gangs while stuck: nodes no one can use, waiting for
  // capacity (as opposed to waiting for the gang's own pods to arrive, counted below).
  double stranded_node_hours = 0;
  int max_stranded_nodes = 0;
  // Node-hours held by gangs before they run, for any reason (members still arriving included).
  double held_before_run_node_hours = 0;
  WaitStats wait;       // every gang
  WaitStats wait_two;   // 2-node gangs
  WaitStats wait_four;  // 4-node gangs
  int singles_placed = 0;
  int singles_rejected = 0;
  // Over the arrival window (first to last arrival): devices held by any pod or seat, and
  // devices of pods that are running (single pods and gangs whose members are all placed).
  double mean_allocated_share = 0;
  double mean_running_share = 0;
  std::vector<GangOutcome> outcomes;  // per gang, in stream order
};

struct GangSimResult {
  int ultraservers = 0;
  int plain_nodes = 0;
  int nodes = 0;
  int devices = 0;
  uint64_t seed = 0;
  int64_t timeout_s = 0;
  double load = 0;
  int jobs = 0;
  int gangs_two = 0;
  int gangs_four = 0;
  int singles = 0;
  double arrival_window_hours = 0;
  // Gangs that waited over a minute longer under one strategy than under the other.
  int longer_all_or_nothing = 0;
  int longer_pod_by_pod = 0;
  std::vector<GangStrategyResult> strategies;  // all-or-nothing, then pod-by-pod
};

Result<GangSimResult> SimulateGangs(const topology::Catalog& catalog,
                                    const GangSimOptions& options);

// The comparison as a text table (what `toposched simulate --gangs` prints).
std::string FormatGangTable(const GangSimResult& result);
// One JSON object, one line.
std::string FormatGangJson(const GangSimResult& result);

}  // namespace toposched::sim

#endif  // TOPOSCHED_SIM_GANGS_H_
