// One policy's fleet in the simulator: the production tracker with every node, the scheduler's
// node choice on top of it (as the extender's prioritize ranks them), and the fleet totals the
// replays sample (allocation, fragmentation), kept in step after every change. The replays
// (simulator.cc) drive it: place, remove, devices out of service. Internal to src/sim.
#ifndef TOPOSCHED_SIM_POLICY_RUN_H_
#define TOPOSCHED_SIM_POLICY_RUN_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "base/result.h"
#include "sim/bind.h"
#include "sim/simulator.h"
#include "topology/allocator.h"
#include "topology/pools.h"
#include "tracker/tracker.h"

namespace toposched::sim::internal {

using topology::NodeShape;
using topology::NodeUsage;
using topology::Policy;
using topology::Request;
using topology::Unit;

// Nodes drawn in the report's device maps: at most this many of each type, and in all.
constexpr int kMapNodesPerType = 2;
constexpr int kMapNodesTotal = 8;

// One GPU task to replay, with the pod the scheduler sees for it.
struct Job {
  int task = 0;  // index in the trace
  Request request;
  int64_t creation_ns = 0;
  int64_t deletion_ns = 0;
  tracker::PodSpec pod;
};

// The simulator's cached view of one node, refreshed from the tracker after every change there.
struct NodeView {
  std::string name;
  NodeShape shape;
  int64_t allocated_units = 0;  // used cores x (units_per_device / cores_per_device)
  int free_devices = 0;         // devices with no core in use
  int largest_free_set = 0;     // the largest device count a legal free set still has
  NodeUsage usage;
  std::vector<int> core_owner;  // kept only for the report
};

struct FleetNode {
  std::string name;
  NodeShape shape;
  std::string pool;  // a shared pool's name, or empty
};

// The largest N for which a request of N devices would be granted on this node now, asking the
// allocator itself (legality differs by rule, so the answer is not monotone in N).
inline int LargestFreeSet(const NodeShape& shape, const NodeUsage& usage, Policy policy, int free) {
  for (int n = std::min(free, shape.devices); n >= 1; --n) {
    const Request request{Unit::kDevice, n};
    // Skips counts the rules never allow, without formatting a refusal for each.
    if (policy != Policy::kCountOnly && !topology::CheckRequestShape(shape, request).empty()) {
      continue;
    }
    if (topology::Allocate(shape, usage, request, policy).ok()) return n;
  }
  return 0;
}

// One policy's fleet: a tracker with every node, and the scheduler's node choice on top of it.
class PolicyRun {
 public:
  PolicyRun(const topology::Catalog& catalog, Policy policy, const std::vector<FleetNode>& fleet,
            const topology::PoolSet* pools, size_t jobs, bool keep_owners)
      : tracker_(catalog, policy, pools),
        policy_(policy),
        keep_owners_(keep_owners),
        fleet_(fleet) {
    names_.reserve(fleet.size());
    nodes_.reserve(fleet.size());
    std::map<std::string, size_t> first_head;
    for (const auto& node : fleet) {
      // The fleet's types were checked before, so an error here is a bug; the run reports it
      // (setup()) instead of simulating a fleet without the node.
      if (auto s =
              tracker_.UpsertNode({node.name, node.shape.type->name, node.shape.lnc, node.pool});
          !s.ok() && setup_.ok()) {
        setup_ = Error{fmt::format("simulated node {}: {}", node.name, s.error())};
      }
      names_.push_back(node.name);
      NodeView view;
      view.name = node.name;
      view.shape = node.shape;
      if (keep_owners_) view.core_owner.assign(static_cast<size_t>(node.shape.cores), -1);
      // A shared pool's devices are counted once, on its first head node.
      size_t counted = nodes_.size();
      if (!node.pool.empty()) {
        counted = first_head.emplace(node.pool, nodes_.size()).first->second;
      }
      counted_on_.push_back(counted);
      nodes_.push_back(std::move(view));
      if (counted == counted_on_.size() - 1) total_devices_ += node.shape.devices;
      units_per_device_ = std::lcm(units_per_device_, int64_t{node.shape.cores_per_device});
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (counted_on_[i] == i) Refresh(i);
    }
    placed_on_.assign(jobs, -1);
    unresolvable_.assign(nodes_.size(), false);
    out_of_service_.assign(nodes_.size(), 0);
  }

  // Node `node`'s devices out of service become `devices` (its agent reported them): the tracker
  // offers none of them from now on; holds already on them stay until their pods leave.
  Status SetOutOfService(size_t node, topology::DeviceMask devices) {
    const FleetNode& f = fleet_[node];
    out_of_service_[node] = devices;
    TOPOSCHED_RETURN_IF_ERROR(
        tracker_.UpsertNode({f.name, f.shape.type->name, f.shape.lnc, f.pool, {}, devices}));
    Refresh(counted_on_[node]);
    return OkStatus();
  }

  // Device `device` of node `node` fails (`out`) or is back. Returns the jobs whose ids touch it.
  Result<std::vector<size_t>> SetDeviceOut(size_t node, int device, bool out) {
    const topology::DeviceMask bit = topology::DeviceMask{1} << device;
    TOPOSCHED_RETURN_IF_ERROR(SetOutOfService(
        node, out ? (out_of_service_[node] | bit) : (out_of_service_[node] & ~bit)));
    std::vector<size_t> holders;
    if (!out) return holders;
    // The node's own holders, not every job: a replay has thousands of jobs and many outages.
    const std::vector<tracker::NodeView> views = tracker_.NodeViews(std::span(&names_[node], 1));
    if (views.empty()) return holders;
    for (const tracker::HolderView& holder : views.front().holders) {
      const auto job = job_of_uid_.find(holder.uid);
      if (job == job_of_uid_.end()) continue;
      for (const auto& container : holder.containers) {
        if ((container.placement.devices & bit) != 0) {
          holders.push_back(job->second);
          break;
        }
      }
    }
    std::sort(holders.begin(), holders.end());  // deterministic: job order, as before
    return holders;
  }

  // The devices a placed job holds, a core counting 1/cores_per_device; 0 when not placed.
  double HeldDevices(size_t job_index, const Job& job) const {
    const int node = placed_on_[job_index];
    if (node < 0) return 0;
    const double cpd = nodes_[static_cast<size_t>(node)].shape.cores_per_device;
    return job.request.unit == Unit::kDevice ? job.request.count : job.request.count / cpd;
  }

  // Places the job or says why not. Errors only if the tracker contradicts itself.
  // `retry`: the pod was tried before (queue mode), so it is not counted into the demand again.
  Result<std::optional<RejectReason>> Place(size_t job_index, const Job& job, int64_t now_ns,
                                            bool retry = false) {
    const int node = ChooseNode(job.pod, retry);
    if (node < 0) return std::optional<RejectReason>(Classify(job.request));
    TOPOSCHED_ASSIGN_OR_RETURN(
        auto reserved, BindPod(tracker_, job.pod, names_[static_cast<size_t>(node)], now_ns));
    placed_on_[job_index] = node;
    job_of_uid_[job.pod.uid] = job_index;
    if (keep_owners_) SetOwner(counted_on_[static_cast<size_t>(node)], reserved, job.task);
    Refresh(counted_on_[static_cast<size_t>(node)]);
    return std::optional<RejectReason>();
  }

  // The pod left: give its ids back. Pods that were never placed have nothing to give.
  void Remove(size_t job_index, const Job& job) {
    const int node = placed_on_[job_index];
    if (node < 0) return;
    if (keep_owners_) {
      if (auto hold = tracker_.Find(job.pod.uid)) {
        SetOwner(counted_on_[static_cast<size_t>(node)], hold->allocation, -1);
      }
    }
    tracker_.Forget(job.pod.uid);
    placed_on_[job_index] = -1;
    job_of_uid_.erase(job.pod.uid);
    Refresh(counted_on_[static_cast<size_t>(node)]);
  }

  // True when some node whose type could ever grant `request` has that many free units, counted
  // without topology: a pod waiting now waits for a legal set, not for room.
  bool FitsIgnoringTopology(const Request& request) const {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const NodeView& node = nodes_[counted_on_[i]];
      if (!topology::CanEverGrant(node.shape, request)) continue;
      if (topology::Allocate(node.shape, node.usage, request, Policy::kCountOnly).ok()) return true;
    }
    return false;
  }

  // Whether a pod asking `request` should let the smaller pods waiting now go first
  // (tracker::Tracker::HoldsBack, what the extender's filter asks).
  topology::HoldBack HoldsBack(const Request& request, int64_t waited_ns,
                               std::span<const topology::WaitingClass> waiting,
                               int64_t age_ns) const {
    return tracker_.HoldsBack(request, waited_ns, waiting, age_ns);
  }
  // Whether some node's type could ever grant the request.
  bool EverLegal(const Request& request) const {
    return std::any_of(nodes_.begin(), nodes_.end(), [&](const NodeView& node) {
      return topology::CanEverGrant(node.shape, request);
    });
  }
  // An arrival held back without being tried still counts into the expected demand, once.
  void ObserveOnly(const tracker::PodSpec& pod) { tracker_.ObserveDemand(pod); }

  double free_devices() const { return total_devices_ - allocated_devices(); }
  // Device-equivalents: a core counts as 1/cores_per_device of its device.
  double allocated_devices() const {
    return static_cast<double>(allocated_units_) / static_cast<double>(units_per_device_);
  }
  double unallocated_share() const {
    return total_devices_ == 0 ? 0.0 : 1.0 - allocated_devices() / total_devices_;
  }
  double allocated_share() const { return 1.0 - unallocated_share(); }
  // 1 - (sum of each node's largest legal free set) / (free devices); nullopt when none is free.
  std::optional<double> fragmentation() const {
    if (free_devices_ == 0) return std::nullopt;
    return 1.0 - static_cast<double>(largest_sets_) / free_devices_;
  }

  // The current owners of the nodes the report draws.
  std::vector<DeviceMap> DeviceMaps() const {
    std::vector<DeviceMap> maps;
    std::map<std::string, int, std::less<>> per_type;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const NodeView& node = nodes_[i];
      if (counted_on_[i] != i) continue;  // a pool is drawn once, on its first head
      if (static_cast<int>(maps.size()) >= kMapNodesTotal) break;
      if (per_type[node.shape.type->name]++ >= kMapNodesPerType) continue;
      maps.push_back({node.name, node.shape.type->name, node.shape.devices,
                      node.shape.cores_per_device, node.core_owner, node.shape.type});
    }
    return maps;
  }
  // Whether every node of the fleet was accepted by the tracker (the first refusal otherwise).
  Status setup() const { return setup_; }

 private:
  // The scheduler's part: which node, as the tracker ranks them for the policy (the extender's
  // prioritize serves the same ranking). Every arrival is counted into the expected demand first,
  // placed or not, as the extender counts each pod once when it is first filtered.
  int ChooseNode(const tracker::PodSpec& pod, bool retry) {
    const tracker::Ranking ranking =
        retry ? tracker_.Rank(pod, names_) : sim::ChooseNode(tracker_, pod, names_);
    for (size_t i = 0; i < ranking.fits.size(); ++i)
      unresolvable_[i] = ranking.fits[i].unresolvable;
    return ranking.best;
  }

  // REQUIRES: no node fits, and unresolvable_ was filled in by ChooseNode for every node.
  RejectReason Classify(const Request& request) const {
    bool any_resolvable = false;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (unresolvable_[i]) continue;
      any_resolvable = true;
      // Enough free units, counted without topology, means topology is what said no.
      const NodeView& node = nodes_[counted_on_[i]];
      if (topology::Allocate(node.shape, node.usage, request, Policy::kCountOnly).ok()) {
        return RejectReason::kNoLegalSet;
      }
    }
    return any_resolvable ? RejectReason::kNoRoom : RejectReason::kNeverLegal;
  }

  void Refresh(size_t i) {
    NodeView& node = nodes_[i];
    allocated_units_ -= node.allocated_units;
    free_devices_ -= node.free_devices;
    largest_sets_ -= node.largest_free_set;
    if (auto snapshot = tracker_.Snapshot(node.name)) node.usage = snapshot->usage;
    // Held by pods: a device out of service and held by none is not allocated, only unusable.
    node.allocated_units =
        node.usage.held_core_count() * (units_per_device_ / node.shape.cores_per_device);
    node.free_devices = std::popcount(node.shape.AllDevices() & ~node.usage.busy_devices());
    node.largest_free_set = LargestFreeSet(node.shape, node.usage, policy_, node.free_devices);
    allocated_units_ += node.allocated_units;
    free_devices_ += node.free_devices;
    largest_sets_ += node.largest_free_set;
  }

  void SetOwner(size_t node_index, const tracker::PodAllocation& allocation, int owner) {
    NodeView& node = nodes_[node_index];
    const int cpd = node.shape.cores_per_device;
    for (const auto& container : allocation.containers) {
      for (int id : container.placement.ids) {
        const bool device = container.placement.unit == Unit::kDevice;
        const int first = device ? id * cpd : id;
        const int last = device ? first + cpd : id + 1;
        for (int c = first; c < last; ++c) node.core_owner[static_cast<size_t>(c)] = owner;
      }
    }
  }

  tracker::Tracker tracker_;
  Status setup_ = OkStatus();
  const Policy policy_;
  const bool keep_owners_;
  const std::vector<FleetNode>& fleet_;
  std::vector<topology::DeviceMask> out_of_service_;  // per node
  std::vector<std::string> names_;
  std::vector<NodeView> nodes_;
  // Per node: the view whose usage and totals stand for its devices (itself, or its pool's
  // first head).
  std::vector<size_t> counted_on_;
  std::vector<int> placed_on_;                          // per job: node index, -1 when not placed
  std::unordered_map<std::string, size_t> job_of_uid_;  // placed jobs, by their pod's uid
  std::vector<bool> unresolvable_;  // per node, for the last ChooseNode that found none
  int total_devices_ = 0;
  // Fleet totals, kept in step with nodes_ by Refresh. Allocation is counted in integer units
  // (1/units_per_device_ of a device, a multiple of every node's core size) so sums never drift.
  int64_t units_per_device_ = 1;
  int64_t allocated_units_ = 0;
  int free_devices_ = 0;
  int largest_sets_ = 0;
};

}  // namespace toposched::sim::internal

#endif  // TOPOSCHED_SIM_POLICY_RUN_H_
