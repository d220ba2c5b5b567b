// The tracker's nodes and queries: nodes and their pools, fit and rank, demand and supply,
// snapshots. The other files of the class are listed in tracker.h.
#include "tracker/tracker.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tracker/fitting.h"

namespace toposched::tracker {

using topology::NodeShape;
using topology::NodeUsage;

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
  RecountAllLocked();  // no lock: nothing else can see the tracker yet (unchecked in constructors)
}

Status Tracker::UpsertNode(const NodeInfo& requested) {
  MutexLock lock(mu_);
  NodeInfo info = requested;
  std::string kept;  // why the node keeps the shape its parked holds were taken on
  if (auto departed = departed_.find(info.name); departed != departed_.end()) {
    const NodeInfo& old = departed->second;
    const auto parked = parked_.find(info.name);
    if (parked != parked_.end() &&
        (old.instance_type != info.instance_type || old.lnc != info.lnc || old.pool != info.pool)) {
      kept = fmt::format(
          "node {} came back as {} (LNC {}{}) while {} pods' holds are parked for it; keeping "
          "LNC {} ({}), the shape they were taken on, until they are gone",
          info.name, info.instance_type, info.lnc, info.pool.empty() ? "" : ", pool " + info.pool,
          parked->second.size(), old.lnc, old.instance_type);
      info = old;
      info.groups = requested.groups;  // labels can change without the shape changing
      info.out_of_service = requested.out_of_service;
    }
    departed_.erase(departed);
  }
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
      fresh.own.usage.SetOutOfService(*fresh.own.shape, info.out_of_service);
    } else {
      fresh.own.error = shape.error();
    }
  } else {
    fresh.own.error = topology::Catalog::UnknownTypeMessage(info.instance_type);
  }
  auto it = nodes_.find(info.name);
  if (it != nodes_.end()) {
    NodeEntry& old = it->second;
    fresh.gang = old.gang;
    if (old.info.instance_type == info.instance_type && old.info.lnc == info.lnc &&
        old.info.pool == info.pool) {
      old.info.groups = info.groups;  // labels can change without the shape changing
      if (!old.pool().shape) return Error{fmt::format("node {}: {}", info.name, old.pool().error)};
      TakeOutOfServiceLocked(old, info.out_of_service);
      return OkStatus();
    }
    if (!old.own.pods.empty()) {
      // The shape stays, but failed devices count now: a new set must never contain one.
      TakeOutOfServiceLocked(old, info.out_of_service);
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
  // Under the same lock as the node's arrival: no query sees it before its pods' ids are taken.
  std::vector<std::string> problems = UnparkLocked(stored);
  if (!kept.empty()) problems.insert(problems.begin(), std::move(kept));
  if (!problems.empty()) return Error{fmt::format("{}", fmt::join(problems, "; "))};
  return OkStatus();
}

void Tracker::TakeOutOfServiceLocked(NodeEntry& node, topology::DeviceMask devices) {
  if (node.shared != nullptr || !node.own.shape || node.info.out_of_service == devices) return;
  node.info.out_of_service = devices;
  node.own.usage.SetOutOfService(*node.own.shape, devices);
  RecountLocked(node.own);
}

void Tracker::RemoveNode(const std::string& name) {
  MutexLock lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  if (!it->second.gang.empty()) {
    ReleaseGangLocked(it->second.gang);  // a gang short of a node cannot be placed whole
    it = nodes_.find(name);
  }
  // The node's own holds are parked (the pods may well still run), not dropped; their usage goes
  // with the node's pool state.
  for (const auto& uid : it->second.own.pods) {
    auto hit = holds_.find(uid);
    if (hit == holds_.end()) continue;
    hit->second.parked = true;
    parked_[name].push_back(uid);
  }
  if (parked_.count(name) != 0) departed_.insert_or_assign(name, it->second.info);
  UncountLocked(it->second.own);
  nodes_.erase(it);
}

const Tracker::NodeEntry* Tracker::FindNode(const std::string& name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

FitResult Tracker::FitLocked(const PodSpec& pod, const NodeEntry& node, const NodeUsage& usage,
                             bool with_ids, const topology::SlotCosts* costs) const {
  if (std::string barrier = GangBarrierLocked(pod, node); !barrier.empty()) {
    FitResult r;
    r.reason = std::move(barrier);
    return r;
  }
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
  ReaderLock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  if (entry == nullptr) {
    return UnknownNodeFit(node);
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
  ReaderLock lock(mu_);
  // Without ids, nodes in the same state get the same answer (as in Rank); with ids every answer
  // names its node.
  boost::unordered_flat_map<NodeStateKey, FitResult, NodeStateHash, NodeStateEq> answered;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeEntry* entry = FindNode(nodes[i]);
    if (entry == nullptr) {
      fn(i, UnknownNodeFit(nodes[i]));
      continue;
    }
    const PoolState& pool = entry->pool();
    if (with_ids || !pool.shape || !entry->gang.empty()) {
      fn(i, FitLocked(pod, *entry, pool.usage, with_ids));
      continue;
    }
    auto [it, fresh] = answered.try_emplace(NodeStateKey{&*pool.shape, &pool.usage});
    if (fresh) it->second = FitLocked(pod, *entry, pool.usage, with_ids);
    fn(i, FitResult(it->second));
  }
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
  if (recount_deferred_) return;
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
  MutexLock lock(mu_);
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
  ReaderLock lock(mu_);
  return demand_;
}

std::vector<int64_t> Tracker::Supply() const {
  ReaderLock lock(mu_);
  return supply_;
}

topology::HoldBack Tracker::HoldsBack(const Request& request, int64_t waited_ns,
                                      std::span<const topology::WaitingClass> waiting,
                                      int64_t age_ns) const {
  if (waited_ns >= age_ns) return {};
  std::vector<topology::WaitingClass> known(waiting.begin(), waiting.end());
  ReaderLock lock(mu_);
  const auto& classes = demand_.classes();
  for (topology::WaitingClass& c : known) {
    c.fits = false;
    for (size_t i = 0; i < classes.size() && i < supply_.size(); ++i) {
      if (classes[i].request == c.request) {
        c.fits = supply_[i] > 0;
        break;
      }
    }
  }
  const double free_devices =
      static_cast<double>(free_units_) / static_cast<double>(topology::kUnitsPerDevice);
  return topology::HoldsBack(request, waited_ns, known, free_devices, age_ns);
}

namespace {

// Per fitting node in a ranking: what the policy minimises, and for kScarcity the state ties are
// broken by.
struct RankCandidate {
  double badness = 0;
  double fullness = 0;
  const NodeShape* shape = nullptr;
  const NodeUsage* usage = nullptr;
};

// What `policy` minimises for a node that fits: the `i`-th of the call's names, `fullness` of
// its cores used.
double Badness(Policy policy, const FitResult& fit, double fullness, size_t i) {
  switch (policy) {
    case Policy::kScarcity:
    case Policy::kFgd:
    case Policy::kFgdScarcitySets:
      return fit.cost;
    case Policy::kBestFit:
      return -fit.score;
    case Policy::kSpread:
      return fullness;
    case Policy::kBinpack:
      return -fullness;
    case Policy::kFirstFit:
    case Policy::kCountOnly:
      break;
  }
  return static_cast<double>(i);
}

// Whether candidate `a` ranks before `b`. kScarcity's order: least cost, then the fuller node
// (binpack among equals), then a fixed order of instance types and usages, so that a permuted
// fleet makes the same choices; the other policies break ties by the call's order.
bool RanksBefore(const std::vector<RankCandidate>& keyed, size_t a, size_t b, bool scarcity) {
  const RankCandidate& x = keyed[a];
  const RankCandidate& y = keyed[b];
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
}

}  // namespace

Ranking Tracker::Rank(const PodSpec& pod, std::span<const std::string> nodes) const {
  ReaderLock lock(mu_);
  const topology::SlotCosts costs = CostsLocked();
  const bool scarcity = policy_ == Policy::kScarcity;
  Ranking out;
  out.fits.reserve(nodes.size());
  out.scores.assign(nodes.size(), 0);
  std::vector<RankCandidate> keyed(nodes.size());
  auto better = [&](size_t a, size_t b) { return RanksBefore(keyed, a, b, scarcity); };
  boost::unordered_flat_map<NodeStateKey, size_t, NodeStateHash, NodeStateEq> answered;
  answered.reserve(nodes.size());
  double lowest = 0;
  double highest = 0;
  // Every lookup first, in a loop of its own: they are independent, so the CPU overlaps their
  // cache misses (on 100,000 nodes the lookups were most of the ranking's time).
  std::vector<const NodeEntry*> entries(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) entries[i] = FindNode(nodes[i]);
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i + kAhead < nodes.size() && entries[i + kAhead] != nullptr) {
      // The lines the loop reads next from that node, loaded while this one is ranked.
      const NodeEntry* next = entries[i + kAhead];
      __builtin_prefetch(&next->shared);
      __builtin_prefetch(&next->own.shape);
      __builtin_prefetch(&next->own.usage);
      __builtin_prefetch(&next->gang);
    }
    const NodeEntry* entry = entries[i];
    if (entry == nullptr) {
      out.fits.push_back(UnknownNodeFit(nodes[i]));
      continue;
    }
    const PoolState& pool = entry->pool();
    // A node a gang holds is not ranked: it refuses other pods, and members go to their seats.
    if (!pool.shape || !entry->gang.empty()) {
      out.fits.push_back(FitLocked(pod, *entry, pool.usage, /*with_ids=*/false, &costs));
      out.fits.back().fits = false;
      continue;
    }
    // Nodes in the same state get the same answer: big clusters have many (empty ones, full
    // ones, ones running the same workload), and scoring is most of prioritize's cost.
    const auto [seen, fresh] = answered.try_emplace(NodeStateKey{&*pool.shape, &pool.usage}, i);
    out.fits.push_back(fresh ? FitLocked(pod, *entry, pool.usage, /*with_ids=*/false, &costs)
                             : out.fits[seen->second]);
    const FitResult& fit = out.fits.back();
    if (!fit.fits) continue;
    RankCandidate& k = keyed[i];
    k.shape = &*pool.shape;
    k.usage = &pool.usage;
    k.fullness = pool.shape->cores == 0
                     ? 0.0
                     : static_cast<double>(pool.usage.used_core_count()) / pool.shape->cores;
    k.badness = Badness(policy_, fit, k.fullness, i);
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
  ReaderLock lock(mu_);
  auto it = holds_.find(uid);
  if (it == holds_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeInfo> Tracker::DepartedNode(const std::string& name) const {
  ReaderLock lock(mu_);
  auto it = departed_.find(name);
  if (it == departed_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeSnapshot> Tracker::Snapshot(const std::string& node) const {
  ReaderLock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  if (entry == nullptr || !entry->pool().shape) return std::nullopt;
  return NodeSnapshot{entry->info, *entry->pool().shape, entry->pool().usage, entry->pool().pods};
}

std::vector<std::string> Tracker::NodeNames() const {
  ReaderLock lock(mu_);
  std::vector<std::string> names;
  names.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string Tracker::PoolOf(const std::string& node) const {
  ReaderLock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  return entry != nullptr ? entry->HoldPool() : std::string();
}

std::optional<topology::NodeUsage> Tracker::PoolUsage(const std::string& pool) const {
  ReaderLock lock(mu_);
  auto it = shared_.find(pool);
  if (it == shared_.end()) return std::nullopt;
  return it->second.usage;
}

TrackerStats Tracker::Stats() const {
  ReaderLock lock(mu_);
  TrackerStats stats;
  stats.nodes = static_cast<int>(nodes_.size());
  stats.reserved = static_cast<int>(reserved_uids_.size());
  stats.releasing = static_cast<int>(releasing_uids_.size());
  stats.gangs = static_cast<int>(gangs_.size());
  stats.committed = static_cast<int>(holds_.size() - reserved_uids_.size()) - stats.releasing;
  for (const auto& [node, uids] : parked_) stats.parked += static_cast<int>(uids.size());
  return stats;
}

uint64_t Tracker::Generation() const {
  ReaderLock lock(mu_);
  return generation_;
}

}  // namespace toposched::tracker
