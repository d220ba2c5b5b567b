// Rebuild and adopt: holds taken from the allocations recorded on pods (at start, on every
// resync, and for binds seen through the watch), with conflicts reported instead of applied.
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tracker/tracker.h"

namespace toposched::tracker {

namespace {
bool SameIds(const PodAllocation& a, const PodAllocation& b) {
  if (a.containers.size() != b.containers.size()) return false;
  for (size_t i = 0; i < a.containers.size(); ++i) {
    const topology::Placement& x = a.containers[i].placement;
    const topology::Placement& y = b.containers[i].placement;
    if (a.containers[i].container != b.containers[i].container || x.unit != y.unit ||
        x.ids != y.ids) {
      return false;
    }
  }
  return true;
}
}  // namespace

Status Tracker::Adopt(const RecordedPod& pod) {
  MutexLock lock(mu_);
  if (auto it = holds_.find(pod.uid); it != holds_.end()) {
    if (it->second.state == HoldState::kReleasing) {
      return Error{fmt::format("pod {} is being released", pod.name)};
    }
    if (it->second.allocation.node == pod.allocation.node) {
      if (!SameIds(it->second.allocation, pod.allocation)) {
        // The pod's record is what the device plugin will serve: hold exactly that, or refuse
        // and keep what is held.
        auto nit = nodes_.find(pod.allocation.node);
        if (nit == nodes_.end()) {
          return Error{fmt::format("node {} is not known", pod.allocation.node)};
        }
        PoolState& pool = nit->second.pool();
        if (auto s = ValidateAllocation(pool, pod.allocation); !s.ok()) return s;
        ReleaseLocked(pool, pod.uid, it->second.allocation);
        if (!TakeLocked(pool, pod.allocation)) {
          const auto holders = HoldersOverlapping(pool, pod.allocation);
          TakeLocked(pool, it->second.allocation);  // just released, so it fits again
          pool.pods.push_back(pod.uid);
          return Error{fmt::format("pod {} records ids on {} that are held by {}", pod.name,
                                   pod.allocation.node, fmt::join(holders, ", "))};
        }
        pool.pods.push_back(pod.uid);
        it->second.allocation = pod.allocation;
      }
      // Our own bind, seen again through the watch.
      SetStateLocked(pod.uid, it->second, HoldState::kCommitted);
      return OkStatus();
    }
    return Error{fmt::format("pod {} is recorded on {} but held on {}", pod.name,
                             pod.allocation.node, it->second.allocation.node)};
  }
  auto nit = nodes_.find(pod.allocation.node);
  if (nit == nodes_.end()) return Error{fmt::format("node {} is not known", pod.allocation.node)};
  NodeEntry& entry = nit->second;
  if (auto s = ValidateAllocation(entry.pool(), pod.allocation); !s.ok()) return s;
  if (!InsertHoldLocked(
          entry.pool(), pod.uid,
          Hold{pod.name, pod.allocation, HoldState::kCommitted, 0, entry.HoldPool()})) {
    return Error{fmt::format("pod {} records ids on {} that are held by {}", pod.name,
                             pod.allocation.node,
                             fmt::join(HoldersOverlapping(entry.pool(), pod.allocation), ", "))};
  }
  return OkStatus();
}

RebuildReport Tracker::Rebuild(std::span<const RecordedPod> pods, bool keep_reservations) {
  MutexLock lock(mu_);
  RebuildReport report;
  // Holds being released stay whatever the list says: their partitions still exist.
  std::vector<std::pair<std::string, Hold>> in_flight;
  std::vector<std::pair<std::string, Hold>> releasing;
  for (auto& [uid, hold] : holds_) {
    if (hold.state == HoldState::kReleasing) releasing.emplace_back(uid, hold);
    if (keep_reservations && hold.state == HoldState::kReserved) in_flight.emplace_back(uid, hold);
  }
  holds_.clear();
  reserved_uids_.clear();
  releasing_uids_.clear();
  for (auto& [name, node] : nodes_)
    node.own = PoolState{node.own.shape, node.own.error, {}, {}, {}, 0};
  for (auto& [name, pool] : shared_) pool = PoolState{pool.shape, pool.error, {}, {}, {}, 0};
  RecountAllLocked();
  for (auto& [uid, hold] : releasing) {
    PoolState* pool = PoolOfHold(hold);
    if (pool != nullptr && pool->shape) InsertHoldLocked(*pool, uid, std::move(hold));
  }
  // Runs under the lock taken above (the analysis checks a lambda on its own).
  auto apply = [&](const std::string& uid, const std::string& pod_name, const PodAllocation& alloc,
                   Hold hold) TS_REQUIRES(mu_) -> bool {
    RebuildProblem problem{uid, pod_name, alloc.node, {}, {}};
    auto nit = nodes_.find(alloc.node);
    if (holds_.count(uid) != 0) {
      problem.message = holds_.at(uid).state == HoldState::kReleasing
                            ? "its partition is being removed"
                            : "the pod is listed twice";
    } else if (nit == nodes_.end()) {
      problem.message = fmt::format("node {} is not known", alloc.node);
    } else if (auto s = ValidateAllocation(nit->second.pool(), alloc); !s.ok()) {
      problem.message = s.error();
    } else {
      hold.pool = nit->second.HoldPool();
      if (InsertHoldLocked(nit->second.pool(), uid, std::move(hold))) return true;
      problem.conflicting_uids = HoldersOverlapping(nit->second.pool(), alloc);
      std::vector<std::string> names;
      for (const auto& other : problem.conflicting_uids) names.push_back(holds_.at(other).pod_name);
      problem.message = fmt::format("its recorded ids on {} are already held by {}", alloc.node,
                                    fmt::join(names, ", "));
    }
    report.problems.push_back(std::move(problem));
    return false;
  };
  for (const auto& pod : pods) {
    if (apply(pod.uid, pod.name, pod.allocation,
              Hold{pod.name, pod.allocation, HoldState::kCommitted, 0, {}})) {
      ++report.applied;
    }
  }
  for (auto& [uid, hold] : in_flight) {
    if (holds_.count(uid) != 0) continue;  // its bind landed and the list saw it
    const PodAllocation alloc = hold.allocation;
    const std::string name = hold.pod_name;
    if (apply(uid, name, alloc, std::move(hold))) ++report.reservations_kept;
  }
  return report;
}

}  // namespace toposched::tracker
