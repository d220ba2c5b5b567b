// Gangs: a multi-node job's pods placed all at once, one per node, in whole groups of nodes (an
// UltraServer or one of its halves). The first member's filter reserves a seat for every member
// in one step with one deadline, so two gangs can never each hold a part of what both need; each
// member then goes to its own seat. Seats are ordinary reserved holds (GangSeatKey), so usage,
// supply and conflicts are counted as for any pod.
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>
#include <fmt/format.h>

#include "topology/limits.h"
#include "tracker/fitting.h"
#include "tracker/gang_seats.h"
#include "tracker/tracker.h"

namespace toposched::tracker {

namespace {

constexpr std::string_view kSeatPrefix = "gang-seat/";
using topology::kMaxGangSize;

// A group of nodes a gang could take: `nodes[i]` is the member with index i.
// Views into the candidates and the tracker's node entries, valid under the tracker's lock.
struct GroupChoice {
  std::string_view id;
  std::vector<std::string_view> nodes;
  int breaks = 0;         // larger groups it would break into (keep whole UltraServers whole)
  double cost = 0;        // what the members' sets take from the expected demand (kScarcity)
  bool unusable = false;  // a member does not fit, or the labels give two nodes one index
};

}  // namespace

std::string GangSeatKey(std::string_view gang, int rank) {
  return fmt::format("{}{}#{}", kSeatPrefix, gang, rank);
}

bool IsGangSeatKey(std::string_view key) { return key.starts_with(kSeatPrefix); }

std::string Tracker::GangBarrierLocked(const PodSpec& pod, const NodeEntry& node) const {
  if (node.gang.empty() || node.gang == pod.gang) return {};
  auto it = gangs_.find(node.gang);
  if (it == gangs_.end()) return {};
  return fmt::format("node {} is held for gang {} ({} of its {} members not yet bound)",
                     node.info.name, node.gang, it->second.UnboundCount(), it->second.size);
}

void Tracker::ReleaseGangLocked(const std::string& id) {
  auto it = gangs_.find(id);
  if (it == gangs_.end()) return;
  const GangState& gang = it->second;
  for (int rank = 0; rank < gang.size; ++rank) {
    if (auto hold = holds_.find(GangSeatKey(id, rank)); hold != holds_.end()) {
      EraseHoldLocked(hold);
    }
  }
  for (const GangRank& rank : gang.ranks) {
    if (auto node = nodes_.find(rank.node); node != nodes_.end() && node->second.gang == id) {
      node->second.gang.clear();
    }
  }
  gangs_.erase(it);
}

namespace {

// What a gang request must be before any node is looked at.
Status CheckGangRequest(const GangRequest& request) {
  const int size = request.size;
  const int per_group = request.group_nodes;
  if (size < 1 || size > kMaxGangSize) {
    return Error{fmt::format("gang {}: size {} is outside 1..{}", request.id, size, kMaxGangSize)};
  }
  if (per_group != 1 && per_group != 2 && per_group != 4) {
    return Error{fmt::format("gang {}: groups of {} nodes; UltraServer node configs are 1, 2, 4",
                             request.id, per_group)};
  }
  if (size % per_group != 0) {
    return Error{fmt::format("gang {}: {} members do not fill whole {}-node groups", request.id,
                             size, per_group)};
  }
  for (const auto& [rank, uid] : request.bound) {
    if (rank < 0 || rank >= size) {
      return Error{
          fmt::format("gang {}: bound rank {} is outside 0..{}", request.id, rank, size - 1)};
    }
  }
  if (!request.fixed_nodes.empty()) {
    if (static_cast<int>(request.fixed_nodes.size()) != size) {
      return Error{fmt::format("gang {}: {} recorded nodes for {} members", request.id,
                               request.fixed_nodes.size(), size)};
    }
    std::vector<std::string> sorted = request.fixed_nodes;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return Error{fmt::format("gang {}: its record names a node twice", request.id)};
    }
  }
  return OkStatus();
}

}  // namespace

std::vector<std::string> GangState::Nodes() const {
  std::vector<std::string> nodes;
  nodes.reserve(ranks.size());
  for (const GangRank& rank : ranks) nodes.push_back(rank.node);
  return nodes;
}

int GangState::RankOf(std::string_view uid) const {
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].member_uid == uid) return static_cast<int>(r);
  }
  return -1;
}

int GangState::UnboundCount() const {
  return static_cast<int>(
      std::count_if(ranks.begin(), ranks.end(), [](const GangRank& r) { return !r.bound; }));
}

Result<GangState> Tracker::ReserveGang(const GangRequest& request,
                                       std::span<const std::string> candidates,
                                       int64_t deadline_ns) {
  TOPOSCHED_RETURN_IF_ERROR(CheckGangRequest(request));
  PodSpec member = request.member;
  member.gang = request.id;

  MutexLock lock(mu_);
  if (gangs_.count(request.id) != 0) {
    return Error{fmt::format("gang {} is already held", request.id)};
  }
  const topology::SlotCosts costs = CostsLocked();
  Result<std::vector<std::string>> nodes =
      ChooseGangNodesLocked(request, member, candidates, costs);
  if (!nodes.ok()) return Error{nodes.error()};
  GangState gang;
  gang.id = request.id;
  gang.size = request.size;
  gang.group_nodes = request.group_nodes;
  gang.deadline_ns = deadline_ns;
  gang.ranks.resize(static_cast<size_t>(request.size));
  for (size_t r = 0; r < gang.ranks.size(); ++r) gang.ranks[r].node = std::move((*nodes)[r]);
  for (const auto& [rank, uid] : request.bound) {
    gang.ranks[static_cast<size_t>(rank)].bound = true;
    gang.ranks[static_cast<size_t>(rank)].member_uid = uid;
  }
  TOPOSCHED_RETURN_IF_ERROR(HoldGangSeatsLocked(member, costs, gang));
  if (gang.UnboundCount() == 0) return gang;  // nothing left to hold
  for (const GangRank& rank : gang.ranks) {
    if (auto nit = nodes_.find(rank.node); nit != nodes_.end()) nit->second.gang = request.id;
  }
  return gangs_[request.id] = std::move(gang);
}

namespace {

// Why a gang finds `usable` of the `need` node groups it must have: how many groups and nodes
// were looked at, and up to three nodes' own reasons.
Error GangCannotBePlaced(const GangRequest& request, size_t need, size_t usable, size_t groups,
                         int seen_nodes, int incomplete, const std::vector<std::string>& refusals) {
  const int size = request.size;
  const int per_group = request.group_nodes;
  std::string found = per_group == 1
                          ? fmt::format(
                                "it needs {} nodes with room for a member and found {} among {} "
                                "candidate nodes",
                                need, usable, seen_nodes)
                          : fmt::format(
                                "it needs {} whole {}-node UltraServer group{} with room for every "
                                "member and found {} ({} groups among {} candidate nodes{})",
                                need, per_group, need == 1 ? "" : "s", usable, groups, seen_nodes,
                                incomplete > 0 ? fmt::format(", {} of them with members missing "
                                                             "among the candidates",
                                                             incomplete)
                                               : "");
  return Error{fmt::format("gang {} ({} members, one per node{}) cannot be placed whole: {}{}{}",
                           request.id, size,
                           per_group == 1 ? "" : fmt::format(", in {}-node groups", per_group),
                           found, refusals.empty() ? "" : "; ", fmt::join(refusals, "; "))};
}

// The `need` groups a gang takes among `usable`, as member nodes in rank order: larger groups
// kept whole for the gangs that need them, then least cost, then a fixed order.
// The groups every member fits and whose every index has a node (moved out of `groups`), and
// how many were left with an index no candidate filled.
std::vector<GroupChoice> UsableGroups(
    boost::unordered_flat_map<std::string_view, GroupChoice>& groups, int& incomplete) {
  std::vector<GroupChoice> usable;
  for (auto& [id, choice] : groups) {
    if (choice.unusable) continue;
    const bool complete = std::none_of(choice.nodes.begin(), choice.nodes.end(),
                                       [](std::string_view n) { return n.empty(); });
    if (!complete) {
      ++incomplete;
      continue;
    }
    usable.push_back(std::move(choice));
  }
  return usable;
}

std::vector<std::string> TakeGroups(std::vector<GroupChoice> usable, size_t need) {
  std::vector<std::string> nodes;
  std::partial_sort(usable.begin(), usable.begin() + static_cast<std::ptrdiff_t>(need),
                    usable.end(), [](const GroupChoice& a, const GroupChoice& b) {
                      if (a.breaks != b.breaks) return a.breaks < b.breaks;
                      if (a.cost != b.cost) return a.cost < b.cost;
                      return a.id < b.id;
                    });
  usable.resize(need);
  // Ranks follow the group ids, then the index inside each group (AWS's topology order).
  std::sort(usable.begin(), usable.end(),
            [](const GroupChoice& a, const GroupChoice& b) { return a.id < b.id; });
  for (const auto& choice : usable) {
    for (std::string_view node : choice.nodes) nodes.emplace_back(node);
  }
  return nodes;
}

}  // namespace

Result<std::vector<std::string>> Tracker::ChooseGangNodesLocked(
    const GangRequest& request, const PodSpec& member, std::span<const std::string> candidates,
    const topology::SlotCosts& costs) const {
  if (!request.fixed_nodes.empty()) return request.fixed_nodes;
  const int size = request.size;
  const int per_group = request.group_nodes;
  // Candidate groups: every node of the group among the candidates and free for a member.
  // Open addressing with views for keys: a search visits every candidate node, twice.
  boost::unordered_flat_map<std::string_view, GroupChoice> groups;
  // Per group id: candidate nodes in it, and whether all of them are empty (a whole group).
  boost::unordered_flat_map<std::string_view, std::pair<int, bool>> group_state;
  groups.reserve(candidates.size());
  group_state.reserve(candidates.size() * 2);
  std::vector<std::string> refusals;
  int seen_nodes = 0;
  for (const auto& name : candidates) {
    const NodeEntry* entry = FindNode(name);
    if (entry == nullptr) continue;
    ++seen_nodes;
    const bool empty = entry->gang.empty() && entry->pool().usage.used_core_count() == 0;
    for (const NodeGroup& g : entry->info.groups) {
      auto [e, fresh] = group_state.try_emplace(g.id, 0, true);
      ++e->second.first;
      e->second.second = e->second.second && empty;
    }
  }
  // Nodes in the same state get the same answer (most nodes of a fleet are in a few states).
  boost::unordered_flat_map<NodeStateKey, FitResult, NodeStateHash, NodeStateEq> answered;
  FitResult unknown;
  auto fit_cached = [&](const NodeEntry& entry) TS_REQUIRES_SHARED(mu_) -> const FitResult& {
    const PoolState& pool = entry.pool();
    if (!pool.shape) {
      unknown = FitLocked(member, entry, pool.usage, false, &costs);
      return unknown;
    }
    auto [it, fresh] = answered.try_emplace(NodeStateKey{&*pool.shape, &pool.usage});
    if (fresh) it->second = FitLocked(member, entry, pool.usage, false, &costs);
    return it->second;
  };
  auto whole = [&](const NodeGroup& g) {
    auto it = group_state.find(g.id);
    return it != group_state.end() && it->second.first == g.nodes && it->second.second;
  };
  const NodeGroup alone{1, "", 0};  // every node is a group of its own for 1-node gangs
  for (const auto& name : candidates) {
    const NodeEntry* entry = FindNode(name);
    if (entry == nullptr) continue;
    const NodeGroup* mine = nullptr;
    if (per_group == 1) {
      mine = &alone;
    } else {
      for (const NodeGroup& g : entry->info.groups) {
        if (g.nodes == per_group) mine = &g;
      }
      if (mine == nullptr || mine->index < 0 || mine->index >= per_group) continue;
    }
    if (!entry->gang.empty()) {  // held for another gang: no need to fit (or word why, twice)
      GroupChoice& choice = groups[per_group == 1 ? std::string_view(name) : mine->id];
      choice.unusable = true;
      if (refusals.size() < 3) refusals.push_back(GangBarrierLocked(member, *entry));
      continue;
    }
    const FitResult& fit = fit_cached(*entry);
    const std::string_view group_id = per_group == 1 ? std::string_view(name) : mine->id;
    GroupChoice& choice = groups[group_id];
    if (choice.nodes.empty()) {
      choice.id = group_id;
      choice.nodes.assign(static_cast<size_t>(per_group), std::string_view());
    }
    if (!fit.fits) {
      choice.unusable = true;
      if (refusals.size() < 3) refusals.push_back(fmt::format("{}: {}", name, fit.reason));
      continue;
    }
    choice.cost += fit.cost;
    std::string_view& slot = choice.nodes[static_cast<size_t>(mine->index)];
    if (!slot.empty()) {
      choice.unusable = true;  // two nodes claim one index: the labels are wrong
      if (refusals.size() < 3) {
        refusals.push_back(fmt::format("{} and {} both claim index {} of group {}", slot, name,
                                       mine->index, group_id));
      }
      continue;
    }
    slot = name;
    for (const NodeGroup& g : entry->info.groups) {
      if (g.nodes > per_group && whole(g)) ++choice.breaks;
    }
  }
  int incomplete = 0;
  std::vector<GroupChoice> usable = UsableGroups(groups, incomplete);
  const size_t need = static_cast<size_t>(size / per_group);
  if (usable.size() < need) {
    return GangCannotBePlaced(request, need, usable.size(), groups.size(), seen_nodes, incomplete,
                              refusals);
  }
  return TakeGroups(std::move(usable), need);
}

Status Tracker::HoldGangSeatsLocked(const PodSpec& member, const topology::SlotCosts& costs,
                                    GangState& gang) {
  // Hold every unbound rank's ids, or none.
  std::vector<std::string> taken;
  auto undo = [&]() TS_REQUIRES(mu_) {
    for (const auto& key : taken) EraseHoldLocked(holds_.find(key));
  };
  for (int r = 0; r < gang.size; ++r) {
    GangRank& rank = gang.ranks[static_cast<size_t>(r)];
    if (rank.bound) continue;
    auto nit = nodes_.find(rank.node);
    if (nit == nodes_.end()) {
      undo();
      return Error{fmt::format("gang {} rank {}: {}", gang.id, r, UnknownNodeReason(rank.node))};
    }
    NodeEntry& entry = nit->second;
    FitResult fit = FitLocked(member, entry, entry.pool().usage, true, &costs);
    const std::string key = GangSeatKey(gang.id, r);
    if (!fit.fits) {
      undo();
      return Error{fmt::format("gang {} cannot be placed whole: rank {} on node {}: {}", gang.id, r,
                               rank.node, fit.reason)};
    }
    fit.allocation.node = rank.node;
    if (!InsertHoldLocked(entry.pool(), key,
                          Hold{fmt::format("gang {} rank {}", gang.id, r), fit.allocation,
                               HoldState::kReserved, gang.deadline_ns, entry.HoldPool()})) {
      undo();
      return Error{"internal error: a fitting gang seat overlapped held ids"};
    }
    taken.push_back(key);
    rank.seat = std::move(fit.allocation);
  }
  return OkStatus();
}

std::optional<GangState> Tracker::FindGang(const std::string& id) const {
  ReaderLock lock(mu_);
  auto it = gangs_.find(id);
  if (it == gangs_.end()) return std::nullopt;
  return it->second;
}

bool Tracker::HoldsGang(const std::string& id) const {
  ReaderLock lock(mu_);
  return gangs_.count(id) != 0;
}

Result<GangSeat> Tracker::SeatGangMember(const std::string& id, const std::string& uid, int wanted,
                                         int64_t deadline_ns) {
  MutexLock lock(mu_);
  auto it = gangs_.find(id);
  if (it == gangs_.end()) return Error{fmt::format("gang {} is not held", id)};
  GangState& gang = it->second;
  auto seat_at = [&](int r) {
    GangRank& rank = gang.ranks[static_cast<size_t>(r)];
    rank.member_uid = uid;
    gang.deadline_ns = std::max(gang.deadline_ns, deadline_ns);
    return GangSeat{r, rank.node, rank.seat};
  };
  if (const int r = gang.RankOf(uid); r >= 0) {
    const GangRank& rank = gang.ranks[static_cast<size_t>(r)];
    if (rank.bound) {
      return Error{fmt::format("pod {} of gang {} is bound already (rank {})", uid, id, r)};
    }
    return GangSeat{r, rank.node, rank.seat};
  }
  if (wanted >= 0 && wanted < gang.size &&
      gang.ranks[static_cast<size_t>(wanted)].member_uid.empty()) {
    return seat_at(wanted);
  }
  if (const int r = gang.RankOf(""); r >= 0) return seat_at(r);
  return Error{
      fmt::format("gang {} has all {} members already; this pod is one too many", id, gang.size)};
}

Status Tracker::ExtendGang(const std::string& id, int64_t deadline_ns) {
  MutexLock lock(mu_);
  auto it = gangs_.find(id);
  if (it == gangs_.end()) return Error{fmt::format("gang {} is not held", id)};
  it->second.deadline_ns = std::max(it->second.deadline_ns, deadline_ns);
  return OkStatus();
}

Result<PodAllocation> Tracker::CommitGangMember(const std::string& id, const std::string& uid,
                                                const std::string& pod_name,
                                                const std::string& node) {
  MutexLock lock(mu_);
  auto it = gangs_.find(id);
  if (it == gangs_.end()) {
    return Error{fmt::format("gang {} is not held (its reservation ran out)", id)};
  }
  GangState& gang = it->second;
  const int rank = gang.RankOf(uid);
  if (rank < 0) return Error{fmt::format("pod {} has no seat in gang {}", uid, id)};
  GangRank& seat = gang.ranks[static_cast<size_t>(rank)];
  if (seat.bound) return Error{fmt::format("pod {} of gang {} is bound already", uid, id)};
  if (seat.node != node) {
    return Error{fmt::format("pod {} has rank {} of gang {}, whose node is {}, not {}", uid, rank,
                             id, seat.node, node)};
  }
  if (holds_.count(uid) != 0) return Error{fmt::format("pod {} already holds ids", uid)};
  auto hold = holds_.find(GangSeatKey(id, rank));
  if (hold == holds_.end()) {
    return Error{fmt::format("gang {} rank {}: its seat is gone", id, rank)};
  }
  // The seat becomes the pod's hold: same ids, so the pool's usage does not change.
  Hold moved = std::move(hold->second);
  if (PoolState* pool = PoolOfHold(moved)) {
    std::replace(pool->pods.begin(), pool->pods.end(), hold->first, uid);
  }
  reserved_uids_.erase(hold->first);
  holds_.erase(hold);
  PodAllocation allocation = moved.allocation;
  moved.pod_name = pod_name;
  moved.state = HoldState::kCommitted;
  moved.deadline_ns = 0;
  moved.generation = ++generation_;  // committed now: newer than any list requested before
  holds_[uid] = std::move(moved);
  seat.bound = true;
  seat.seat = {};
  if (gang.UnboundCount() == 0) {
    ReleaseGangLocked(id);  // every member is bound: the nodes are ordinary again
  }
  return allocation;
}

bool Tracker::ReleaseGang(const std::string& id) {
  MutexLock lock(mu_);
  if (gangs_.count(id) == 0) return false;
  ReleaseGangLocked(id);
  return true;
}

}  // namespace toposched::tracker
