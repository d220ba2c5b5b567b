// Preemption search: which pods' removal would let a pod fit on a node. Queries only (shared
// lock); the extender's preempt verb asks them.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tracker/fitting.h"
#include "tracker/tracker.h"

namespace toposched::tracker {
namespace {

using topology::NodeShape;
using topology::NodeUsage;

// The union of a pod's sets, deduplicated (init containers may reuse app ids).
std::vector<Placement> Footprint(const PodAllocation& a) {
  std::vector<Placement> out;
  for (const auto& c : a.containers) out.push_back(c.placement);
  return out;
}

}  // namespace

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
  ReaderLock lock(mu_);
  const NodeEntry* entry = FindNode(node);
  if (entry == nullptr) {
    return UnknownNodeFit(node);
  }
  if (!entry->pool().shape) return FitLocked(pod, *entry, entry->pool().usage);
  return FitLocked(pod, *entry, UsageWithout(*entry, gone_uids));
}

Result<std::vector<std::string>> Tracker::FewestVictims(
    const PodSpec& pod, const std::string& node,
    std::span<const std::string> candidate_uids) const {
  ReaderLock lock(mu_);
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
  // Runs under the caller's shared lock (the analysis checks a lambda on its own).
  auto holders_of = [&](const Placement& p) TS_REQUIRES_SHARED(mu_) {
    std::vector<std::string> out;
    for (const auto& uid : candidates) {
      for (const auto& held : Footprint(holds_.at(uid).allocation)) {
        if (topology::Overlaps(shape, held, p)) {
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
        options = {Placement::FromIds(shape, Unit::kDevice, ids)};
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

}  // namespace toposched::tracker
