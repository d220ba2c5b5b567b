// The hold state machine: reserve, commit, roll back, expire, release, forget. Every hold enters
// through InsertHoldLocked and leaves through EraseHoldLocked, which keep the pools' usage and the
// per-state indexes in step with holds_.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "topology/id_ranges.h"
#include "tracker/fitting.h"
#include "tracker/gang_seats.h"
#include "tracker/tracker.h"

namespace toposched::tracker {

using topology::NodeShape;

Tracker::PoolState* Tracker::PoolOfHold(const Hold& hold) {
  if (hold.parked) return nullptr;
  if (!hold.pool.empty()) {
    auto it = shared_.find(hold.pool);
    return it == shared_.end() ? nullptr : &it->second;
  }
  auto it = nodes_.find(hold.allocation.node);
  return it == nodes_.end() ? nullptr : &it->second.own;
}

bool Tracker::InsertHoldLocked(PoolState& pool, const std::string& uid, Hold hold) {
  if (!TakeLocked(pool, hold.allocation)) return false;
  pool.pods.push_back(uid);
  if (hold.state == HoldState::kReserved) reserved_uids_.insert(uid);
  if (hold.state == HoldState::kReleasing) releasing_uids_.insert(uid);
  hold.parked = false;
  hold.generation = ++generation_;
  holds_[uid] = std::move(hold);
  return true;
}

void Tracker::ParkLocked(const std::string& uid, Hold hold) {
  if (auto it = holds_.find(uid); it != holds_.end()) EraseHoldLocked(it);
  hold.parked = true;
  hold.generation = ++generation_;
  if (hold.state == HoldState::kReserved) reserved_uids_.insert(uid);
  if (hold.state == HoldState::kReleasing) releasing_uids_.insert(uid);
  parked_[hold.allocation.node].push_back(uid);
  holds_[uid] = std::move(hold);
}

std::vector<std::string> Tracker::UnparkLocked(NodeEntry& node) {
  std::vector<std::string> dropped;
  auto pit = parked_.find(node.info.name);
  if (pit == parked_.end() || !node.pool().shape) return dropped;
  const std::vector<std::string> uids = std::move(pit->second);
  parked_.erase(pit);
  for (const auto& uid : uids) {
    auto it = holds_.find(uid);
    if (it == holds_.end() || !it->second.parked) continue;
    Hold hold = it->second;
    hold.pool = node.HoldPool();
    Status valid = ValidateAllocation(node.pool(), hold.allocation);
    if (valid.ok() && TakeLocked(node.pool(), hold.allocation)) {
      node.pool().pods.push_back(uid);
      it->second.pool = hold.pool;
      it->second.parked = false;
      continue;
    }
    const std::string why =
        valid.ok() ? fmt::format("its ids are held by {}",
                                 fmt::join(HoldersOverlapping(node.pool(), hold.allocation), ", "))
                   : valid.error();
    dropped.push_back(
        fmt::format("pod {} parked on {} no longer fits: {}", hold.pod_name, node.info.name, why));
    reserved_uids_.erase(uid);
    releasing_uids_.erase(uid);
    holds_.erase(it);
  }
  return dropped;
}

void Tracker::SetStateLocked(const std::string& uid, Hold& hold, HoldState state) {
  hold.state = state;
  hold.deadline_ns = 0;
  hold.generation = ++generation_;
  reserved_uids_.erase(uid);
  releasing_uids_.erase(uid);
  if (state == HoldState::kReleasing) releasing_uids_.insert(uid);
}

void Tracker::EraseHoldLocked(std::unordered_map<std::string, Hold>::iterator it) {
  if (it->second.parked) {
    if (auto pit = parked_.find(it->second.allocation.node); pit != parked_.end()) {
      std::erase(pit->second, it->first);
      if (pit->second.empty()) {
        departed_.erase(pit->first);  // nothing is parked on its old shape any more
        parked_.erase(pit);
      }
    }
  } else if (PoolState* pool = PoolOfHold(it->second)) {
    ReleaseLocked(*pool, it->first, it->second.allocation);
  }
  reserved_uids_.erase(it->first);
  releasing_uids_.erase(it->first);
  holds_.erase(it);
}

Status Tracker::ValidateAllocation(const PoolState& pool, const PodAllocation& allocation) const {
  if (!pool.shape) return Error{pool.error};
  const NodeShape& shape = *pool.shape;
  for (const auto& c : allocation.containers) {
    const int limit = c.placement.unit == Unit::kDevice ? shape.devices : shape.cores;
    for (int id : c.placement.ids) {
      if (id < 0 || id >= limit) {
        return Error{fmt::format("container '{}': {} id {} is out of range for {} (0-{})",
                                 c.container, topology::UnitName(c.placement.unit, 1), id,
                                 shape.type->name, limit - 1)};
      }
    }
  }
  return OkStatus();
}

std::vector<std::string> Tracker::HoldersOverlapping(const PoolState& pool,
                                                     const PodAllocation& allocation) const {
  std::vector<std::string> out;
  for (const auto& uid : pool.pods) {
    if (Overlaps(*pool.shape, holds_.at(uid).allocation, allocation)) out.push_back(uid);
  }
  return out;
}

bool Tracker::TakeLocked(PoolState& pool, const PodAllocation& allocation) {
  // The pod's footprint as cores. Its own sets may overlap (an init container reusing app ids);
  // other pods' may not.
  const NodeShape& shape = *pool.shape;
  topology::CoreBits mine;
  for (const auto& c : allocation.containers) mine |= topology::CoresOf(shape, c.placement);
  if ((mine & pool.usage.held_cores()).any()) return false;
  std::vector<int> cores;
  for (int c = 0; c < shape.cores; ++c) {
    if (mine.test(static_cast<size_t>(c))) cores.push_back(c);
  }
  if (!pool.usage.Take(shape, Unit::kCore, cores)) return false;
  RecountLocked(pool);
  return true;
}

void Tracker::ReleaseLocked(PoolState& pool, const std::string& uid,
                            const PodAllocation& allocation) {
  for (const auto& c : allocation.containers) {
    pool.usage.Release(*pool.shape, c.placement.unit, c.placement.ids);
  }
  pool.pods.erase(std::remove(pool.pods.begin(), pool.pods.end(), uid), pool.pods.end());
  RecountLocked(pool);
}

Result<PodAllocation> Tracker::Reserve(const PodSpec& pod, const std::string& node,
                                       int64_t deadline_ns) {
  MutexLock lock(mu_);
  if (auto it = holds_.find(pod.uid); it != holds_.end()) {
    return Error{
        fmt::format("pod {} already holds ids on node {}", pod.name, it->second.allocation.node)};
  }
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) {
    return Error{UnknownNodeReason(node)};
  }
  NodeEntry& entry = nit->second;
  const topology::SlotCosts costs = CostsLocked();
  FitResult fit = FitLocked(pod, entry, entry.pool().usage, true, &costs);
  if (!fit.fits)
    return Error{fmt::format("pod {} does not fit on {}: {}", pod.name, node, fit.reason)};
  if (!InsertHoldLocked(
          entry.pool(), pod.uid,
          Hold{pod.name, fit.allocation, HoldState::kReserved, deadline_ns, entry.HoldPool()})) {
    return Error{"internal error: a fitting allocation overlapped held ids"};
  }
  return fit.allocation;
}

Status Tracker::ReserveExact(const std::string& uid, const std::string& pod_name,
                             const PodAllocation& allocation, int64_t deadline_ns) {
  MutexLock lock(mu_);
  if (holds_.count(uid) != 0) return Error{fmt::format("pod {} already holds ids", pod_name)};
  auto nit = nodes_.find(allocation.node);
  if (nit == nodes_.end()) return Error{fmt::format("node {} is not known", allocation.node)};
  NodeEntry& entry = nit->second;
  if (auto s = ValidateAllocation(entry.pool(), allocation); !s.ok()) return s;
  // A new hold never starts on a failed device (holds already there are kept: Adopt, Rebuild).
  const int cpd = entry.pool().shape->cores_per_device;
  topology::DeviceMask touched = 0;
  for (const auto& c : allocation.containers) {
    for (int id : c.placement.ids) {
      touched |= topology::DeviceMask{1} << (c.placement.unit == Unit::kDevice ? id : id / cpd);
    }
  }
  if (const auto out = touched & entry.pool().usage.out_of_service(); out != 0) {
    return Error{fmt::format("ids for pod {} on {} touch devices out of service: {}", pod_name,
                             allocation.node, topology::FormatIdRanges(topology::MaskToIds(out)))};
  }
  if (!InsertHoldLocked(
          entry.pool(), uid,
          Hold{pod_name, allocation, HoldState::kReserved, deadline_ns, entry.HoldPool()})) {
    return Error{fmt::format("ids for pod {} on {} are held by {}", pod_name, allocation.node,
                             fmt::join(HoldersOverlapping(entry.pool(), allocation), ", "))};
  }
  return OkStatus();
}

Status Tracker::Commit(const std::string& uid) {
  MutexLock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end()) return Error{fmt::format("pod {} has no reservation to commit", uid)};
  if (it->second.state == HoldState::kCommitted) {
    return Error{fmt::format("pod {} is already committed", uid)};
  }
  if (it->second.state == HoldState::kReleasing) {
    return Error{fmt::format("pod {} is being released (deleted while binding)", uid)};
  }
  SetStateLocked(uid, it->second, HoldState::kCommitted);
  return OkStatus();
}

Status Tracker::Rollback(const std::string& uid) {
  MutexLock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end() || it->second.state != HoldState::kReserved) {
    return Error{fmt::format("pod {} has no reservation to roll back", uid)};
  }
  EraseHoldLocked(it);
  return OkStatus();
}

bool Tracker::Forget(const std::string& uid) {
  MutexLock lock(mu_);
  for (auto& [id, gang] : gangs_) {  // a deleted pod gives its unbound seat back
    for (GangRank& rank : gang.ranks) {
      if (rank.member_uid == uid && !rank.bound) rank.member_uid.clear();
    }
  }
  auto it = holds_.find(uid);
  if (it == holds_.end()) return false;
  EraseHoldLocked(it);
  return true;
}

Status Tracker::BeginRelease(const std::string& uid) {
  MutexLock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end()) return Error{fmt::format("pod {} holds nothing", uid)};
  SetStateLocked(uid, it->second, HoldState::kReleasing);
  return OkStatus();
}

Status Tracker::ExtendReservation(const std::string& uid, int64_t deadline_ns) {
  MutexLock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end() || it->second.state != HoldState::kReserved) {
    return Error{fmt::format("pod {} has no reservation to extend", uid)};
  }
  it->second.deadline_ns = deadline_ns;
  return OkStatus();
}

Status Tracker::HoldReleasing(const std::string& uid, const std::string& what,
                              const std::string& pool, const std::vector<int>& device_ids) {
  MutexLock lock(mu_);
  if (holds_.count(uid) != 0) return Error{fmt::format("{} is already held", what)};
  auto it = shared_.find(pool);
  if (it == shared_.end()) return Error{fmt::format("{}: pool {} is not defined", what, pool)};
  PodAllocation allocation{"", {{"partition", Placement{Unit::kDevice, device_ids, 0}}}};
  if (auto s = ValidateAllocation(it->second, allocation); !s.ok()) {
    return Error{fmt::format("{}: {}", what, s.error())};
  }
  if (!InsertHoldLocked(it->second, uid, Hold{what, allocation, HoldState::kReleasing, 0, pool})) {
    return Error{fmt::format("{}: its devices in pool {} are held by {}", what, pool,
                             fmt::join(HoldersOverlapping(it->second, allocation), ", "))};
  }
  return OkStatus();
}

Expired Tracker::ExpireReservations(int64_t now_ns) {
  MutexLock lock(mu_);
  Expired expired;
  for (const auto& uid : reserved_uids_) {
    // A gang's seats expire together, by the gang's deadline (below).
    if (!IsGangSeatKey(uid) && holds_.at(uid).deadline_ns <= now_ns) expired.pods.push_back(uid);
  }
  std::sort(expired.pods.begin(), expired.pods.end());
  for (const auto& uid : expired.pods) EraseHoldLocked(holds_.find(uid));
  for (const auto& [id, gang] : gangs_) {
    if (gang.deadline_ns <= now_ns) expired.gangs.push_back(id);
  }
  std::sort(expired.gangs.begin(), expired.gangs.end());
  for (const auto& id : expired.gangs) ReleaseGangLocked(id);
  return expired;
}

}  // namespace toposched::tracker
