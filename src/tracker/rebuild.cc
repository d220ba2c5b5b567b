// Rebuild and adopt: holds taken from the allocations recorded on pods (at start, on every
// resync, and for binds seen through the watch), with conflicts reported instead of applied.
// A relist merges into what is held (RebuildScope): it drops only what it proves gone.
#include <string>
#include <unordered_set>
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
    if (it->second.allocation.node == pod.allocation.node && it->second.parked) {
      // Its node is not known: the record replaces what is parked, checked when the node comes.
      it->second.pod_name = pod.name;
      it->second.allocation = pod.allocation;
      SetStateLocked(pod.uid, it->second, HoldState::kCommitted);
      return OkStatus();
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
  if (nit == nodes_.end()) {
    ParkLocked(pod.uid, Hold{pod.name, pod.allocation, HoldState::kCommitted, 0, {}});
    return OkStatus();
  }
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
  RebuildScope scope;
  scope.keep_reservations = keep_reservations;
  scope.listed_at = Generation();  // every hold predates the list: it is the whole truth
  return Rebuild(pods, scope);
}

RebuildReport Tracker::Rebuild(std::span<const RecordedPod> pods, const RebuildScope& scope) {
  MutexLock lock(mu_);
  RebuildReport report;
  std::unordered_set<std::string> listed;
  for (const auto& pod : pods) listed.insert(pod.uid);
  // What stays whatever the list says: holds being released (their partitions still exist),
  // reservations in flight, and committed holds the list cannot prove gone.
  std::vector<std::pair<std::string, Hold>> kept;
  std::vector<std::pair<std::string, Hold>> in_flight;
  std::vector<std::pair<std::string, Hold>> releasing;
  for (auto& [uid, hold] : holds_) {
    switch (hold.state) {
      case HoldState::kReleasing:
        releasing.emplace_back(uid, hold);
        break;
      case HoldState::kReserved:
        if (scope.keep_reservations) in_flight.emplace_back(uid, hold);
        break;
      case HoldState::kCommitted:
        if (listed.count(uid) != 0) break;  // its record replaces it
        if (hold.generation > scope.listed_at ||
            (scope.alive != nullptr && scope.alive->count(uid) != 0)) {
          kept.emplace_back(uid, hold);
        } else {
          ++report.dropped;
        }
        break;
    }
  }
  holds_.clear();
  reserved_uids_.clear();
  releasing_uids_.clear();
  parked_.clear();
  for (auto& [name, node] : nodes_) {
    node.own = PoolState{node.own.shape, node.own.error, {}, {}, {}, 0};
    // The holds go; the node's failed devices stay out (they are the node's, not the pods').
    if (node.own.shape) node.own.usage.SetOutOfService(*node.own.shape, node.info.out_of_service);
  }
  for (auto& [name, pool] : shared_) pool = PoolState{pool.shape, pool.error, {}, {}, {}, 0};
  recount_deferred_ = true;  // counted once below, when every hold is back
  // Puts a hold back where its ids are (or parks it when its node is not known), keeping its
  // generation; on failure records the problem and returns false.
  auto place = [&](const std::string& uid, Hold hold, uint64_t generation)
                   TS_REQUIRES(mu_) -> bool {
    const PodAllocation& alloc = hold.allocation;
    RebuildProblem problem{uid, hold.pod_name, alloc.node, {}, {}};
    PoolState* pool = nullptr;
    std::string hold_pool = hold.pool;
    if (!hold.pool.empty()) {
      auto sit = shared_.find(hold.pool);
      if (sit != shared_.end()) pool = &sit->second;
    } else if (auto nit = nodes_.find(alloc.node); nit != nodes_.end()) {
      pool = &nit->second.pool();
      hold_pool = nit->second.HoldPool();
    }
    if (holds_.count(uid) != 0) {
      problem.message = holds_.at(uid).state == HoldState::kReleasing
                            ? "its partition is being removed"
                            : "the pod is listed twice";
    } else if (pool == nullptr && hold.pool.empty()) {
      ParkLocked(uid, std::move(hold));
      holds_.at(uid).generation = generation;
      ++report.parked;
      return true;
    } else if (pool == nullptr) {
      problem.message = fmt::format("pool {} is not defined", hold.pool);
    } else if (!pool->shape) {
      problem.message = pool->error;
    } else if (auto s = ValidateAllocation(*pool, alloc); !s.ok()) {
      problem.message = s.error();
    } else {
      hold.pool = hold_pool;
      const PodAllocation wanted = alloc;
      if (InsertHoldLocked(*pool, uid, std::move(hold))) {
        holds_.at(uid).generation = generation;
        return true;
      }
      problem.conflicting_uids = HoldersOverlapping(*pool, wanted);
      std::vector<std::string> names;
      for (const auto& other : problem.conflicting_uids) names.push_back(holds_.at(other).pod_name);
      problem.message = fmt::format("its recorded ids on {} are already held by {}", wanted.node,
                                    fmt::join(names, ", "));
    }
    report.problems.push_back(std::move(problem));
    return false;
  };
  for (auto& [uid, hold] : releasing) {
    const uint64_t generation = hold.generation;
    place(uid, std::move(hold), generation);
  }
  // Newer knowledge first: a pod bound after the list's snapshot keeps its ids against a record
  // the list still shows for a pod deleted meanwhile.
  for (auto& [uid, hold] : kept) {
    const uint64_t generation = hold.generation;
    if (place(uid, std::move(hold), generation)) ++report.newer_kept;
  }
  for (const auto& pod : pods) {
    if (place(pod.uid, Hold{pod.name, pod.allocation, HoldState::kCommitted, 0, {}},
              scope.listed_at)) {
      ++report.applied;
    }
  }
  for (auto& [uid, hold] : in_flight) {
    if (holds_.count(uid) != 0) continue;  // its bind landed and the list saw it
    const uint64_t generation = hold.generation;
    if (place(uid, std::move(hold), generation)) ++report.reservations_kept;
  }
  recount_deferred_ = false;
  RecountAllLocked();
  // A departed node's old shape is kept only while holds are parked for it.
  std::erase_if(departed_, [&](const auto& entry)
                               TS_REQUIRES(mu_) { return parked_.count(entry.first) == 0; });
  return report;
}

}  // namespace toposched::tracker
