#include "tracker/tracker.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>

#include <fmt/format.h>

#include "topology/id_ranges.h"

namespace toposched::tracker {
namespace {

using topology::Decision;
using topology::NodeShape;
using topology::NodeUsage;

// A usage in which only `allowed` placements' ids are free: init containers first try to reuse
// the ids of the pod's own app containers (Kubernetes' effective-request rule).
NodeUsage OnlyFree(const NodeShape& shape, const std::vector<ContainerAllocation>& allowed) {
  NodeUsage usage;
  std::vector<int> all(static_cast<size_t>(shape.cores));
  std::iota(all.begin(), all.end(), 0);
  usage.Take(shape, Unit::kCore, all);
  for (const auto& a : allowed) usage.Release(shape, a.placement.unit, a.placement.ids);
  return usage;
}

std::string ContainerLabel(const ContainerRequest& c) {
  return fmt::format("{}container '{}'", c.init ? "init " : "", c.name);
}

// Places every container of the pod on one node. App containers each get their own set (largest
// first, which packs better); each init container reuses the app containers' ids when a legal
// set lies inside them, or else takes more. With `with_ids` false a one-container pod's answer
// carries only the verdict and score (no allocation to build and free: filter asks this for
// thousands of nodes per call).
FitResult FitOnUsage(const NodeShape& shape, NodeUsage usage, const PodSpec& pod, Policy policy,
                     bool with_ids, const topology::SlotCosts* costs) {
  FitResult result;
  // Most pods have one container asking: answer without the bookkeeping below.
  if (pod.containers.size() == 1 && !pod.containers[0].init &&
      pod.containers[0].request.count != 0) {
    const ContainerRequest& c = pod.containers[0];
    Decision d = topology::Allocate(shape, usage, c.request, policy, costs);
    if (!d.ok()) {
      result.reason = std::move(d.reason);
      result.unresolvable = d.unresolvable;
      return result;
    }
    result.fits = true;
    result.score = d.score;
    result.cost = d.cost;
    if (with_ids) result.allocation.containers.push_back({c.name, std::move(d.placement)});
    return result;
  }
  std::vector<const ContainerRequest*> apps;
  std::vector<const ContainerRequest*> inits;
  for (const auto& c : pod.containers) {
    if (c.request.count == 0) continue;
    (c.init ? inits : apps).push_back(&c);
  }
  std::stable_sort(apps.begin(), apps.end(), [](const auto* a, const auto* b) {
    return a->request.count > b->request.count;
  });
  double weighted_score = 0;
  int weight = 0;
  auto fail = [&](const ContainerRequest& c, const Decision& d) {
    FitResult r;
    r.reason =
        pod.containers.size() > 1 ? fmt::format("{}: {}", ContainerLabel(c), d.reason) : d.reason;
    r.unresolvable = d.unresolvable;
    return r;
  };
  double cost = 0;
  for (const auto* c : apps) {
    Decision d = topology::Allocate(shape, usage, c->request, policy, costs);
    if (!d.ok()) return fail(*c, d);
    usage.Take(shape, d.placement.unit, d.placement.ids);
    cost += d.cost;
    weighted_score += d.score * c->request.count;
    weight += c->request.count;
    result.allocation.containers.push_back({c->name, std::move(d.placement)});
  }
  // Init containers run one at a time, so each may reuse any ids this pod already holds: the app
  // containers' and those an earlier init container had to take.
  std::vector<ContainerAllocation> own_sets = result.allocation.containers;
  for (const auto* c : inits) {
    Decision d;
    if (!own_sets.empty()) {
      d = topology::Allocate(shape, OnlyFree(shape, own_sets), c->request, policy);
    }
    if (own_sets.empty() || !d.ok()) {
      d = topology::Allocate(shape, usage, c->request, policy, costs);
      if (!d.ok()) return fail(*c, d);
      usage.Take(shape, d.placement.unit, d.placement.ids);
      cost += d.cost;
      weighted_score += d.score * c->request.count;
      weight += c->request.count;
      own_sets.push_back({c->name, d.placement});
    }
    result.allocation.containers.push_back({c->name, std::move(d.placement)});
  }
  result.fits = true;
  result.score = weight == 0 ? 10 : static_cast<int>(std::lround(weighted_score / weight));
  result.cost = cost;
  return result;
}

// The cores a placement covers (a device covers all of its cores). Computed from the ids alone:
// recorded allocations need not carry ascending ids or a correct `devices` mask.
topology::CoreBits CoresOf(const NodeShape& shape, const Placement& p) {
  topology::CoreBits bits;
  for (int id : p.ids) {
    if (p.unit == Unit::kCore) {
      if (id >= 0 && id < shape.cores) bits.set(static_cast<size_t>(id));
    } else if (id >= 0 && id < shape.devices) {
      for (int k = 0; k < shape.cores_per_device; ++k) {
        bits.set(static_cast<size_t>(id * shape.cores_per_device + k));
      }
    }
  }
  return bits;
}

bool Overlaps(const NodeShape& shape, const Placement& a, const Placement& b) {
  return (CoresOf(shape, a) & CoresOf(shape, b)).any();
}

bool Overlaps(const NodeShape& shape, const PodAllocation& a, const PodAllocation& b) {
  for (const auto& x : a.containers) {
    for (const auto& y : b.containers) {
      if (Overlaps(shape, x.placement, y.placement)) return true;
    }
  }
  return false;
}

// The union of a pod's sets, deduplicated (init containers may reuse app ids).
std::vector<Placement> Footprint(const PodAllocation& a) {
  std::vector<Placement> out;
  for (const auto& c : a.containers) out.push_back(c.placement);
  return out;
}

}  // namespace

bool PodSpec::AsksForAnything() const {
  return std::any_of(containers.begin(), containers.end(),
                     [](const ContainerRequest& c) { return c.request.count != 0; });
}

Tracker::Tracker(const topology::Catalog& catalog, Policy policy, const topology::PoolSet* pools)
    : catalog_(catalog), policy_(policy), pools_(pools) {
  supply_.assign(demand_.classes().size(), 0);
  if (pools_ == nullptr) return;
  shared_.reserve(pools_->pools().size());
  for (const auto& [name, def] : pools_->pools()) {
    PoolState& state = shared_[name];
    auto shape = NodeShape::Make(*def.shape_type);
    if (shape.ok()) {
      state.shape = shape.value();
    } else {
      state.error = fmt::format("pool {}: {}", name, shape.error());
    }
  }
  RecountAllLocked();
}

Status Tracker::UpsertNode(const NodeInfo& info) {
  std::unique_lock lock(mu_);
  NodeEntry fresh;
  fresh.info = info;
  if (!info.pool.empty()) {
    // The node's devices are the pool's; its own instance type does not matter.
    auto it = shared_.find(info.pool);
    if (it != shared_.end()) {
      fresh.shared = &it->second;
    } else {
      fresh.own.error = pools_ == nullptr ? fmt::format(
                                                "node {} is labelled {}={}, but the extender was "
                                                "started without a --pools file",
                                                info.name, topology::kPoolLabel, info.pool)
                                          : pools_->UnknownPoolMessage(info.name, info.pool);
    }
  } else if (const auto* type = catalog_.Find(info.instance_type)) {
    auto shape = NodeShape::Make(*type, info.lnc);
    if (shape.ok()) {
      fresh.own.shape = shape.value();
    } else {
      fresh.own.error = shape.error();
    }
  } else {
    fresh.own.error = topology::Catalog::UnknownTypeMessage(info.instance_type);
  }
  auto it = nodes_.find(info.name);
  if (it != nodes_.end()) {
    NodeEntry& old = it->second;
    if (old.info.instance_type == info.instance_type && old.info.lnc == info.lnc &&
        old.info.pool == info.pool) {
      if (!old.pool().shape) return Error{fmt::format("node {}: {}", info.name, old.pool().error)};
      return OkStatus();
    }
    if (!old.own.pods.empty()) {
      return Error{fmt::format(
          "node {} changed from {} (LNC {}) to {} (LNC {}{}) while {} pods hold ids on it; "
          "keeping the old shape until they are gone",
          info.name, old.info.instance_type, old.info.lnc, info.instance_type, info.lnc,
          info.pool.empty() ? "" : ", pool " + info.pool, old.own.pods.size())};
    }
  }
  const std::string error = fresh.pool().error;
  if (it != nodes_.end()) UncountLocked(it->second.own);
  NodeEntry& stored = nodes_[info.name] = std::move(fresh);
  RecountLocked(stored.own);
  if (!error.empty()) {
    return Error{error.starts_with("node ") ? error : fmt::format("node {}: {}", info.name, error)};
  }
  return OkStatus();
}

void Tracker::RemoveNode(const std::string& name) {
  std::unique_lock lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  for (const auto& uid : it->second.own.pods) {
    holds_.erase(uid);
    reserved_uids_.erase(uid);
    releasing_uids_.erase(uid);
  }
  UncountLocked(it->second.own);
  nodes_.erase(it);
}

Tracker::PoolState* Tracker::PoolOfHold(const Hold& hold) {
  if (!hold.pool.empty()) {
    auto it = shared_.find(hold.pool);
    return it == shared_.end() ? nullptr : &it->second;
  }
  auto it = nodes_.find(hold.allocation.node);
  return it == nodes_.end() ? nullptr : &it->second.own;
}

void Tracker::EraseHoldLocked(std::unordered_map<std::string, Hold>::iterator it) {
  if (PoolState* pool = PoolOfHold(it->second)) {
    ReleaseLocked(*pool, it->first, it->second.allocation);
  }
  reserved_uids_.erase(it->first);
  releasing_uids_.erase(it->first);
  holds_.erase(it);
}

const Tracker::NodeEntry* Tracker::FindNode(const std::string& name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

FitResult Tracker::FitLocked(const PodSpec& pod, const NodeEntry& node, const NodeUsage& usage,
                             bool with_ids, const topology::SlotCosts* costs) const {
  if (!node.pool().shape) {
    FitResult r;
    r.reason = node.pool().error;
    r.unresolvable = true;
    return r;
  }
  FitResult r = FitOnUsage(*node.pool().shape, usage, pod, policy_, with_ids, costs);
  if (r.fits && with_ids) r.allocation.node = node.info.name;
  return r;
}

FitResult Tracker::Fit(const PodSpec& pod, const std::string& node) const {
  std::shared_lock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  if (entry == nullptr) {
    FitResult r;
    r.reason = fmt::format("node {} is not known to toposched (not yet synced, or deleted)", node);
    return r;
  }
  const topology::SlotCosts costs = CostsLocked();
  return FitLocked(pod, *entry, entry->pool().usage, true, &costs);
}

std::vector<FitResult> Tracker::FitAll(const PodSpec& pod,
                                       std::span<const std::string> nodes) const {
  std::vector<FitResult> out;
  out.reserve(nodes.size());
  VisitFits(pod, nodes, /*with_ids=*/true,
            [&](size_t, FitResult&& r) { out.push_back(std::move(r)); });
  return out;
}

void Tracker::ForEachFit(const PodSpec& pod, std::span<const std::string> nodes,
                         const std::function<void(size_t, FitResult&&)>& fn) const {
  VisitFits(pod, nodes, /*with_ids=*/false, fn);
}

void Tracker::VisitFits(const PodSpec& pod, std::span<const std::string> nodes, bool with_ids,
                        const std::function<void(size_t, FitResult&&)>& fn) const {
  std::shared_lock lock(mu_);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeEntry* entry = FindNode(nodes[i]);
    if (entry == nullptr) {
      FitResult r;
      r.reason =
          fmt::format("node {} is not known to toposched (not yet synced, or deleted)", nodes[i]);
      fn(i, std::move(r));
      continue;
    }
    fn(i, FitLocked(pod, *entry, entry->pool().usage, with_ids));
  }
}

NodeUsage Tracker::UsageWithout(const NodeEntry& node, std::span<const std::string> uids) const {
  NodeUsage usage = node.pool().usage;
  for (const auto& uid : uids) {
    auto it = holds_.find(uid);
    if (it == holds_.end() || it->second.allocation.node != node.info.name) continue;
    for (const auto& c : it->second.allocation.containers) {
      usage.Release(*node.pool().shape, c.placement.unit, c.placement.ids);
    }
  }
  return usage;
}

FitResult Tracker::FitWithout(const PodSpec& pod, const std::string& node,
                              std::span<const std::string> gone_uids) const {
  std::shared_lock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  if (entry == nullptr) {
    FitResult r;
    r.reason = fmt::format("node {} is not known to toposched (not yet synced, or deleted)", node);
    return r;
  }
  if (!entry->pool().shape) return FitLocked(pod, *entry, entry->pool().usage);
  return FitLocked(pod, *entry, UsageWithout(*entry, gone_uids));
}

Result<std::vector<std::string>> Tracker::FewestVictims(
    const PodSpec& pod, const std::string& node,
    std::span<const std::string> candidate_uids) const {
  std::shared_lock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  if (entry == nullptr) return Error{fmt::format("node {} is not known to toposched", node)};
  if (!entry->pool().shape) return Error{entry->pool().error};
  const NodeShape& shape = *entry->pool().shape;

  // Only candidates that really hold ids on this node can help.
  std::vector<std::string> candidates;
  for (const auto& uid : candidate_uids) {
    auto it = holds_.find(uid);
    if (it != holds_.end() && it->second.allocation.node == node &&
        std::find(candidates.begin(), candidates.end(), uid) == candidates.end()) {
      candidates.push_back(uid);
    }
  }
  if (FitLocked(pod, *entry, entry->pool().usage).fits) return std::vector<std::string>{};
  FitResult all_gone = FitLocked(pod, *entry, UsageWithout(*entry, candidates));
  if (!all_gone.fits) {
    return Error{
        fmt::format("even without all {} offered victims: {}", candidates.size(), all_gone.reason)};
  }

  // Container by container (largest first), choose the legal set that needs the fewest new
  // victims, given the victims already chosen.
  std::vector<const ContainerRequest*> order;
  for (const auto& c : pod.containers) {
    if (c.request.count != 0 && !c.init) order.push_back(&c);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->request.count > b->request.count;
  });
  std::vector<std::string> victims;
  std::vector<Placement> placed;
  auto holders_of = [&](const Placement& p) {
    std::vector<std::string> out;
    for (const auto& uid : candidates) {
      for (const auto& held : Footprint(holds_.at(uid).allocation)) {
        if (Overlaps(shape, held, p)) {
          out.push_back(uid);
          break;
        }
      }
    }
    return out;
  };
  for (const auto* c : order) {
    // Free = everything except non-candidates' ids and the sets already placed for this pod.
    NodeUsage optimistic = UsageWithout(*entry, candidates);
    for (const auto& p : placed) optimistic.Take(shape, p.unit, p.ids);
    std::vector<Placement> options = topology::LegalPlacements(shape, optimistic, c->request);
    if (shape.type->rule == topology::LegalSetRule::kAny && c->request.unit == Unit::kDevice) {
      // Every subset is legal: prefer devices that are free now, then those whose holders free
      // the most devices each.
      NodeUsage now = UsageWithout(*entry, victims);
      for (const auto& p : placed) now.Take(shape, p.unit, p.ids);
      std::vector<int> ids = topology::MaskToIds(shape.AllDevices() & ~now.busy_devices());
      std::vector<int> busy_free_later =
          topology::MaskToIds(now.busy_devices() & ~optimistic.busy_devices() & shape.AllDevices());
      ids.insert(ids.end(), busy_free_later.begin(), busy_free_later.end());
      if (static_cast<int>(ids.size()) >= c->request.count) {
        ids.resize(static_cast<size_t>(c->request.count));
        std::sort(ids.begin(), ids.end());
        Placement p{Unit::kDevice, ids, 0};
        for (int d : ids) p.devices |= topology::DeviceMask{1} << d;
        options = {p};
      }
    }
    const Placement* best = nullptr;
    std::vector<std::string> best_new;
    for (const auto& option : options) {
      std::vector<std::string> needed;
      for (const auto& uid : holders_of(option)) {
        if (std::find(victims.begin(), victims.end(), uid) == victims.end()) needed.push_back(uid);
      }
      if (best == nullptr || needed.size() < best_new.size()) {
        best = &option;
        best_new = std::move(needed);
      }
    }
    if (best == nullptr) break;  // the check below falls back to the greedy loop
    victims.insert(victims.end(), best_new.begin(), best_new.end());
    placed.push_back(*best);
  }
  // The policy places containers its own way; make sure it finds room with these victims gone,
  // adding the largest remaining candidates if a multi-container layout needs more.
  while (!FitLocked(pod, *entry, UsageWithout(*entry, victims)).fits) {
    const std::string* pick = nullptr;
    size_t pick_size = 0;
    for (const auto& uid : candidates) {
      if (std::find(victims.begin(), victims.end(), uid) != victims.end()) continue;
      size_t size = 0;
      for (const auto& c : holds_.at(uid).allocation.containers) size += c.placement.ids.size();
      if (pick == nullptr || size > pick_size) {
        pick = &uid;
        pick_size = size;
      }
    }
    if (pick == nullptr) break;
    victims.push_back(*pick);
  }
  std::sort(victims.begin(), victims.end());
  return victims;
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
  for (const auto& c : allocation.containers) {
    for (int id : c.placement.ids) {
      if (c.placement.unit == Unit::kCore) {
        mine.set(static_cast<size_t>(id));
      } else {
        for (int k = 0; k < shape.cores_per_device; ++k) {
          mine.set(static_cast<size_t>(id * shape.cores_per_device + k));
        }
      }
    }
  }
  if ((mine & pool.usage.used_cores()).any()) return false;
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
  std::unique_lock lock(mu_);
  if (auto it = holds_.find(pod.uid); it != holds_.end()) {
    return Error{
        fmt::format("pod {} already holds ids on node {}", pod.name, it->second.allocation.node)};
  }
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) {
    return Error{
        fmt::format("node {} is not known to toposched (not yet synced, or deleted)", node)};
  }
  NodeEntry& entry = nit->second;
  const topology::SlotCosts costs = CostsLocked();
  FitResult fit = FitLocked(pod, entry, entry.pool().usage, true, &costs);
  if (!fit.fits)
    return Error{fmt::format("pod {} does not fit on {}: {}", pod.name, node, fit.reason)};
  if (!TakeLocked(entry.pool(), fit.allocation)) {
    return Error{"internal error: a fitting allocation overlapped held ids"};
  }
  entry.pool().pods.push_back(pod.uid);
  holds_[pod.uid] = Hold{pod.name, fit.allocation, HoldState::kReserved, deadline_ns,
                         entry.shared != nullptr ? entry.info.pool : std::string()};
  reserved_uids_.insert(pod.uid);
  return fit.allocation;
}

Status Tracker::ReserveExact(const std::string& uid, const std::string& pod_name,
                             const PodAllocation& allocation, int64_t deadline_ns) {
  std::unique_lock lock(mu_);
  if (holds_.count(uid) != 0) return Error{fmt::format("pod {} already holds ids", pod_name)};
  auto nit = nodes_.find(allocation.node);
  if (nit == nodes_.end()) return Error{fmt::format("node {} is not known", allocation.node)};
  NodeEntry& entry = nit->second;
  if (auto s = ValidateAllocation(entry.pool(), allocation); !s.ok()) return s;
  if (!TakeLocked(entry.pool(), allocation)) {
    return Error{fmt::format("ids for pod {} on {} are held by {}", pod_name, allocation.node,
                             fmt::join(HoldersOverlapping(entry.pool(), allocation), ", "))};
  }
  entry.pool().pods.push_back(uid);
  holds_[uid] = Hold{pod_name, allocation, HoldState::kReserved, deadline_ns,
                     entry.shared != nullptr ? entry.info.pool : std::string()};
  reserved_uids_.insert(uid);
  return OkStatus();
}

Status Tracker::Commit(const std::string& uid) {
  std::unique_lock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end()) return Error{fmt::format("pod {} has no reservation to commit", uid)};
  if (it->second.state == HoldState::kCommitted) {
    return Error{fmt::format("pod {} is already committed", uid)};
  }
  if (it->second.state == HoldState::kReleasing) {
    return Error{fmt::format("pod {} is being released (deleted while binding)", uid)};
  }
  it->second.state = HoldState::kCommitted;
  it->second.deadline_ns = 0;
  reserved_uids_.erase(uid);
  return OkStatus();
}

Status Tracker::Rollback(const std::string& uid) {
  std::unique_lock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end() || it->second.state != HoldState::kReserved) {
    return Error{fmt::format("pod {} has no reservation to roll back", uid)};
  }
  EraseHoldLocked(it);
  return OkStatus();
}

bool Tracker::Forget(const std::string& uid) {
  std::unique_lock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end()) return false;
  EraseHoldLocked(it);
  return true;
}

Status Tracker::BeginRelease(const std::string& uid) {
  std::unique_lock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end()) return Error{fmt::format("pod {} holds nothing", uid)};
  it->second.state = HoldState::kReleasing;
  it->second.deadline_ns = 0;
  reserved_uids_.erase(uid);
  releasing_uids_.insert(uid);
  return OkStatus();
}

Status Tracker::ExtendReservation(const std::string& uid, int64_t deadline_ns) {
  std::unique_lock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end() || it->second.state != HoldState::kReserved) {
    return Error{fmt::format("pod {} has no reservation to extend", uid)};
  }
  it->second.deadline_ns = deadline_ns;
  return OkStatus();
}

Status Tracker::HoldReleasing(const std::string& uid, const std::string& what,
                              const std::string& pool, const std::vector<int>& device_ids) {
  std::unique_lock lock(mu_);
  if (holds_.count(uid) != 0) return Error{fmt::format("{} is already held", what)};
  auto it = shared_.find(pool);
  if (it == shared_.end()) return Error{fmt::format("{}: pool {} is not defined", what, pool)};
  PodAllocation allocation{"", {{"partition", Placement{Unit::kDevice, device_ids, 0}}}};
  if (auto s = ValidateAllocation(it->second, allocation); !s.ok()) {
    return Error{fmt::format("{}: {}", what, s.error())};
  }
  if (!TakeLocked(it->second, allocation)) {
    return Error{fmt::format("{}: its devices in pool {} are held by {}", what, pool,
                             fmt::join(HoldersOverlapping(it->second, allocation), ", "))};
  }
  it->second.pods.push_back(uid);
  holds_[uid] = Hold{what, std::move(allocation), HoldState::kReleasing, 0, pool};
  releasing_uids_.insert(uid);
  return OkStatus();
}

std::vector<std::string> Tracker::ExpireReservations(int64_t now_ns) {
  std::unique_lock lock(mu_);
  std::vector<std::string> expired;
  for (const auto& uid : reserved_uids_) {
    if (holds_.at(uid).deadline_ns <= now_ns) expired.push_back(uid);
  }
  std::sort(expired.begin(), expired.end());
  for (const auto& uid : expired) EraseHoldLocked(holds_.find(uid));
  return expired;
}

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
  std::unique_lock lock(mu_);
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
      it->second.state = HoldState::kCommitted;  // our own bind, seen again through the watch
      it->second.deadline_ns = 0;
      reserved_uids_.erase(pod.uid);
      return OkStatus();
    }
    return Error{fmt::format("pod {} is recorded on {} but held on {}", pod.name,
                             pod.allocation.node, it->second.allocation.node)};
  }
  auto nit = nodes_.find(pod.allocation.node);
  if (nit == nodes_.end()) return Error{fmt::format("node {} is not known", pod.allocation.node)};
  NodeEntry& entry = nit->second;
  if (auto s = ValidateAllocation(entry.pool(), pod.allocation); !s.ok()) return s;
  if (!TakeLocked(entry.pool(), pod.allocation)) {
    return Error{fmt::format("pod {} records ids on {} that are held by {}", pod.name,
                             pod.allocation.node,
                             fmt::join(HoldersOverlapping(entry.pool(), pod.allocation), ", "))};
  }
  entry.pool().pods.push_back(pod.uid);
  holds_[pod.uid] = Hold{pod.name, pod.allocation, HoldState::kCommitted, 0,
                         entry.shared != nullptr ? entry.info.pool : std::string()};
  return OkStatus();
}

RebuildReport Tracker::Rebuild(std::span<const RecordedPod> pods, bool keep_reservations) {
  std::unique_lock lock(mu_);
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
    if (pool != nullptr && pool->shape && TakeLocked(*pool, hold.allocation)) {
      pool->pods.push_back(uid);
      releasing_uids_.insert(uid);
      holds_[uid] = std::move(hold);
    }
  }
  auto apply = [&](const std::string& uid, const std::string& pod_name, const PodAllocation& alloc,
                   Hold hold) -> bool {
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
    } else if (!TakeLocked(nit->second.pool(), alloc)) {
      problem.conflicting_uids = HoldersOverlapping(nit->second.pool(), alloc);
      std::vector<std::string> names;
      for (const auto& other : problem.conflicting_uids) names.push_back(holds_.at(other).pod_name);
      problem.message = fmt::format("its recorded ids on {} are already held by {}", alloc.node,
                                    fmt::join(names, ", "));
    } else {
      nit->second.pool().pods.push_back(uid);
      if (hold.state == HoldState::kReserved) reserved_uids_.insert(uid);
      hold.pool = nit->second.shared != nullptr ? nit->second.info.pool : std::string();
      holds_[uid] = std::move(hold);
      return true;
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

topology::SlotCosts Tracker::CostsLocked() const {
  return topology::SlotCosts::From(demand_, supply_, free_units_);
}

void Tracker::UncountLocked(PoolState& pool) {
  for (size_t i = 0; i < pool.slots.size() && i < supply_.size(); ++i) supply_[i] -= pool.slots[i];
  pool.slots.clear();
  free_units_ -= pool.free_units;
  pool.free_units = 0;
}

void Tracker::RecountLocked(PoolState& pool) {
  UncountLocked(pool);
  if (!pool.shape) return;
  const auto& classes = demand_.classes();
  pool.slots.resize(classes.size());
  for (size_t i = 0; i < classes.size(); ++i) {
    pool.slots[i] = topology::FreeSlots(*pool.shape, pool.usage, classes[i].request);
    supply_[i] += pool.slots[i];
  }
  pool.free_units = topology::FreeUnits(*pool.shape, pool.usage);
  free_units_ += pool.free_units;
}

void Tracker::RecountAllLocked() {
  supply_.assign(demand_.classes().size(), 0);
  free_units_ = 0;
  for (auto& [name, node] : nodes_) {
    node.own.slots.clear();
    node.own.free_units = 0;
    RecountLocked(node.own);
  }
  for (auto& [name, pool] : shared_) {
    pool.slots.clear();
    pool.free_units = 0;
    RecountLocked(pool);
  }
}

void Tracker::ObserveDemand(const PodSpec& pod) {
  std::unique_lock lock(mu_);
  const uint64_t generation = demand_.generation();
  bool any_app = false;
  for (const auto& c : pod.containers) {
    if (!c.init && c.request.count > 0) {
      demand_.Observe(c.request);
      any_app = true;
    }
  }
  if (!any_app) {
    for (const auto& c : pod.containers) demand_.Observe(c.request);
  }
  if (demand_.generation() != generation) RecountAllLocked();
}

topology::DemandModel Tracker::Demand() const {
  std::shared_lock lock(mu_);
  return demand_;
}

std::vector<int64_t> Tracker::Supply() const {
  std::shared_lock lock(mu_);
  return supply_;
}

Ranking Tracker::Rank(const PodSpec& pod, std::span<const std::string> nodes) const {
  std::shared_lock lock(mu_);
  const topology::SlotCosts costs = CostsLocked();
  const bool scarcity = policy_ == Policy::kScarcity;
  Ranking out;
  out.fits.reserve(nodes.size());
  out.scores.assign(nodes.size(), 0);
  // Per fitting node: what the policy minimises, and for kScarcity the state ties are broken by.
  struct Candidate {
    double badness = 0;
    double fullness = 0;
    const NodeShape* shape = nullptr;
    const NodeUsage* usage = nullptr;
  };
  std::vector<Candidate> keyed(nodes.size());
  // kScarcity's order: least cost, then the fuller node (binpack among equals), then a fixed order
  // of instance types and usages, so that a permuted fleet makes the same choices.
  auto better = [&](size_t a, size_t b) {
    const Candidate& x = keyed[a];
    const Candidate& y = keyed[b];
    if (x.badness != y.badness) return x.badness < y.badness;
    if (!scarcity) return a < b;
    if (x.fullness != y.fullness) return x.fullness > y.fullness;
    if (x.shape->type != y.shape->type) return x.shape->type->name < y.shape->type->name;
    if (x.shape->lnc != y.shape->lnc) return x.shape->lnc < y.shape->lnc;
    if (x.usage->used_cores() != y.usage->used_cores()) {
      for (int c = 0; c < x.shape->cores; ++c) {
        const bool u = x.usage->used_cores().test(static_cast<size_t>(c));
        if (u != y.usage->used_cores().test(static_cast<size_t>(c))) return u;
      }
    }
    return a < b;
  };
  struct StateKey {
    const NodeShape* shape;
    const NodeUsage* usage;
  };
  struct StateHash {
    size_t operator()(const StateKey& k) const {
      // The first 64 cores tell most states apart and cost one word to read; equality below
      // compares them all.
      const uint64_t low = (k.usage->used_cores() & topology::CoreBits(~uint64_t{0})).to_ullong();
      return std::hash<uint64_t>()(low * 0x9E3779B97F4A7C15ULL ^
                                   reinterpret_cast<uintptr_t>(k.shape->type)) +
             static_cast<size_t>(k.shape->cores_per_device);
    }
  };
  struct StateEq {
    bool operator()(const StateKey& a, const StateKey& b) const {
      return a.shape->type == b.shape->type &&
             a.shape->cores_per_device == b.shape->cores_per_device &&
             a.usage->used_cores() == b.usage->used_cores();
    }
  };
  boost::unordered_flat_map<StateKey, size_t, StateHash, StateEq> answered;
  answered.reserve(nodes.size());
  double lowest = 0;
  double highest = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeEntry* entry = FindNode(nodes[i]);
    if (entry == nullptr) {
      FitResult r;
      r.reason =
          fmt::format("node {} is not known to toposched (not yet synced, or deleted)", nodes[i]);
      out.fits.push_back(std::move(r));
      continue;
    }
    const PoolState& pool = entry->pool();
    if (!pool.shape) {
      out.fits.push_back(FitLocked(pod, *entry, pool.usage, /*with_ids=*/false, &costs));
      continue;
    }
    // Nodes in the same state get the same answer: big clusters have many (empty ones, full
    // ones, ones running the same workload), and scoring is most of prioritize's cost.
    const auto [seen, fresh] = answered.try_emplace(StateKey{&*pool.shape, &pool.usage}, i);
    out.fits.push_back(fresh ? FitLocked(pod, *entry, pool.usage, /*with_ids=*/false, &costs)
                             : out.fits[seen->second]);
    const FitResult& fit = out.fits.back();
    if (!fit.fits) continue;
    Candidate& k = keyed[i];
    k.shape = &*pool.shape;
    k.usage = &pool.usage;
    k.fullness = pool.shape->cores == 0
                     ? 0.0
                     : static_cast<double>(pool.usage.used_core_count()) / pool.shape->cores;
    switch (policy_) {
      case Policy::kScarcity:
        k.badness = fit.cost;
        break;
      case Policy::kBestFit:
        k.badness = -fit.score;
        break;
      case Policy::kSpread:
        k.badness = k.fullness;
        break;
      case Policy::kBinpack:
        k.badness = -k.fullness;
        break;
      case Policy::kFirstFit:
      case Policy::kCountOnly:
        k.badness = static_cast<double>(i);
        break;
    }
    if (out.best < 0) {
      lowest = highest = k.badness;
    } else {
      lowest = std::min(lowest, k.badness);
      highest = std::max(highest, k.badness);
    }
    if (out.best < 0 || better(i, static_cast<size_t>(out.best))) out.best = static_cast<int>(i);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!out.fits[i].fits) continue;
    if (static_cast<int>(i) == out.best) {
      out.scores[i] = 10;
    } else if (highest == lowest) {
      out.scores[i] = 9;
    } else {
      // 1..9 by distance from the worst: never 10, so the choice stays the policy's alone.
      const double closeness = (highest - keyed[i].badness) / (highest - lowest);
      out.scores[i] = 1 + static_cast<int>(std::floor(8.0 * closeness));
    }
  }
  return out;
}

std::optional<Hold> Tracker::Find(const std::string& uid) const {
  std::shared_lock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeSnapshot> Tracker::Snapshot(const std::string& node) const {
  std::shared_lock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  if (entry == nullptr || !entry->pool().shape) return std::nullopt;
  return NodeSnapshot{entry->info, *entry->pool().shape, entry->pool().usage, entry->pool().pods};
}

std::vector<std::string> Tracker::NodeNames() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> names;
  names.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string Tracker::PoolOf(const std::string& node) const {
  std::shared_lock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  return entry != nullptr && entry->shared != nullptr ? entry->info.pool : std::string();
}

std::optional<topology::NodeUsage> Tracker::PoolUsage(const std::string& pool) const {
  std::shared_lock lock(mu_);
  auto it = shared_.find(pool);
  if (it == shared_.end()) return std::nullopt;
  return it->second.usage;
}

TrackerStats Tracker::Stats() const {
  std::shared_lock lock(mu_);
  TrackerStats stats;
  stats.nodes = static_cast<int>(nodes_.size());
  stats.reserved = static_cast<int>(reserved_uids_.size());
  stats.releasing = static_cast<int>(releasing_uids_.size());
  stats.committed = static_cast<int>(holds_.size() - reserved_uids_.size()) - stats.releasing;
  return stats;
}

}  // namespace toposched::tracker
