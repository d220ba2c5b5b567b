// Multi-node gangs (docs/ultraserver.md). kube-scheduler still asks about one pod at a time; the
// first member's filter reserves a seat for every member at once (Tracker::ReserveGang), and
// every member's filter then passes only its own seat's node. Bind writes the member's ids and
// the gang record (rank, the nodes of all ranks, its UltraServer ids, rank 0's host), from which
// the device plugin sets the runtime's env and a restarted extender completes the gang.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/gang.h"
#include "claims/keys.h"
#include "extender/service.h"

namespace toposched::extender {

namespace {

// The API resource a gang's size is read from, for messages.
std::string_view ResourceOf(std::string_view source) {
  if (source == "PodGroup") return "podgroups";
  if (source == "Workload") return "workloads";
  return "mpijobs";
}

}  // namespace

PodRequests ExtenderService::WithGangSize(PodRequests requests, bool may_ask) {
  if (!requests.gang || requests.gang->size > 0 || requests.gang->job_name.empty()) {
    return requests;
  }
  const claims::GangMembership& gang = *requests.gang;
  std::optional<int> size;
  {
    ReaderLock lock(mu_);
    if (auto it = gang_sizes_.find(gang.id); it != gang_sizes_.end()) size = it->second;
  }
  if (!size && may_ask && options_.gang_size) {
    auto read = options_.gang_size(requests.ns, gang);
    if (read.ok() && (*read < 0 || *read > claims::kMaxGangSize)) {
      read = Error{fmt::format("{} members is not 0..{}", *read, claims::kMaxGangSize)};
    }
    if (read.ok()) {
      size = *read;
      MutexLock lock(mu_);
      // Kept while the gang has pods (the caller remembers this one): ForgetPod drops it with
      // the last.
      gang_sizes_[gang.id] = *read;
      if (*read == 0) {
        spdlog::info("{} {}/{}: its policy is basic, not gang: its pods are placed one by one",
                     gang.source, requests.ns, gang.job_name);
      } else {
        spdlog::info("gang {}: {} members, read from its {} {}", gang.id, *read, gang.source,
                     gang.job_name);
      }
    } else {
      spdlog::warn("gang {}: {}", gang.id, read.error());
    }
  }
  if (!size) return requests;
  if (*size == 0) {
    requests.gang.reset();
    requests.spec.gang.clear();
    requests.host.clear();
  } else {
    requests.gang->size = *size;
  }
  return requests;
}

tracker::GangRequest ExtenderService::GangRequestFor(const PodRequests& member, int size) const {
  tracker::GangRequest request;
  request.id = member.gang->id;
  request.size = size;
  request.group_nodes = member.gang->group_nodes;
  request.member = member.spec;
  ReaderLock lock(mu_);
  auto members = gang_members_.find(request.id);
  if (members == gang_members_.end()) return request;
  for (const auto& uid : members->second) {
    auto it = pods_.find(uid);
    if (it == pods_.end() || it->second.node_name.empty() || !it->second.gang_record) continue;
    const claims::GangRecord& record = *it->second.gang_record;
    // The bound members' record is the gang's truth: its size, groups and nodes win.
    if (request.fixed_nodes.empty()) {
      request.size = record.size;
      request.group_nodes = record.group_nodes;
      request.fixed_nodes = record.nodes;
    }
    if (record.nodes == request.fixed_nodes &&
        record.nodes[static_cast<size_t>(record.rank)] == it->second.node_name) {
      request.bound[record.rank] = uid;
    } else {
      spdlog::warn(
          "gang {}: pod {} records rank {} on {}, which disagrees with its gang; it is "
          "not counted as a member",
          request.id, it->second.spec.name, record.rank, it->second.node_name);
    }
  }
  return request;
}

Result<tracker::GangSeat> ExtenderService::SeatGangMember(const PodRequests& member,
                                                          std::span<const std::string> candidates) {
  const claims::GangMembership& gang = *member.gang;
  const int64_t deadline = SteadyNsAfter(options_.gang_timeout);
  if (!tracker_.HoldsGang(gang.id)) {
    tracker::GangRequest request = GangRequestFor(member, gang.size);
    if (request.size == 0) {
      return Error{
          fmt::format("gang {} ({}): its size is unknown; set the annotation {} on its pods{}",
                      gang.id, gang.source, claims::kAnnotationGangSize,
                      gang.job_name.empty()
                          ? ""
                          : fmt::format(" or let toposched read the {} {} (RBAC: get {})",
                                        gang.source, gang.job_name, ResourceOf(gang.source)))};
    }
    if (static_cast<int>(request.bound.size()) >= request.size) {
      return Error{fmt::format("gang {} has all {} members bound already; pod {} is one too many",
                               gang.id, request.size, member.spec.name)};
    }
    if (request.fixed_nodes.empty()) {
      auto reserved = tracker_.ReserveGang(request, candidates, deadline);
      if (!reserved.ok()) {
        if (!tracker_.HoldsGang(gang.id)) return Error{reserved.error()};  // else: raced, held now
      } else {
        metrics_.SetGangsHeld(tracker_.Stats().gangs);
        spdlog::info("gang {} ({} members, {}-node groups) holds nodes {} until its members bind",
                     gang.id, request.size, request.group_nodes, fmt::join(reserved->Nodes(), ","));
      }
    } else {
      // Some members are bound: the rest go to their recorded nodes, whatever the candidates.
      auto reserved = tracker_.ReserveGang(request, request.fixed_nodes, deadline);
      if (!reserved.ok() && !tracker_.HoldsGang(gang.id)) return Error{reserved.error()};
      if (reserved.ok()) {
        metrics_.SetGangsHeld(tracker_.Stats().gangs);
        spdlog::info("gang {}: {} of {} members are bound; the others' seats are held on {}",
                     gang.id, request.bound.size(), request.size,
                     fmt::join(reserved->Nodes(), ","));
      }
    }
  }
  return tracker_.SeatGangMember(gang.id, member.spec.uid, gang.index, deadline);
}

std::string ExtenderService::FilterGangMember(const PodRequests& member,
                                              const std::vector<std::string>& names,
                                              FilterResult& result) {
  auto seat = SeatGangMember(member, names);
  if (!seat.ok()) {
    // Resolvable: the gang may fit once other pods leave; every member stays Pending.
    spdlog::info("filter {}: {}", member.spec.name, seat.error());
    metrics_.CountGangOutcome("refused");
    for (const auto& n : names) result.failed[n] = seat.error();
    return EncodeFilterResult(result);
  }
  const bool offered = std::find(names.begin(), names.end(), seat->node) != names.end();
  if (offered) {
    // Nodes left out of both lists are simply not feasible to kube-scheduler; their reasons would
    // only be shown if the pod stayed Pending, and building thousands of them is most of the call.
    result.passed.push_back(seat->node);
  } else {
    const std::string reason =
        fmt::format("pod {} is rank {} of gang {}, whose seat is on node {}", member.spec.name,
                    seat->rank, member.gang->id, seat->node);
    for (const auto& n : names) result.failed[n] = reason;
    spdlog::warn(
        "filter {}: its seat (rank {} of gang {}) is on node {}, which kube-scheduler "
        "did not offer (another filter refused it); the gang waits until it does or its "
        "seats run out",
        member.spec.name, seat->rank, member.gang->id, seat->node);
  }
  return EncodeFilterResult(result);
}

std::string ExtenderService::BindGangMember(const BindingArgs& args, const PodRequests& member) {
  const std::string key = member.spec.name;
  const std::string& id = member.gang->id;
  if (!tracker_.PoolOf(args.node).empty()) {
    return EncodeBindingResult(
        fmt::format("pod {} of gang {}: gangs on shared pools are not supported", key, id));
  }
  // The seats live as long as a single pod's reservation. ExtendGang fails only when the gang
  // holds no seats, which FindGang then says.
  auto gang = tracker_.ExtendGang(id, BindReservationDeadline()).ok() ? tracker_.FindGang(id)
                                                                      : std::nullopt;
  if (!gang) {
    return EncodeBindingResult(fmt::format(
        "pod {}: gang {} holds no seats (they ran out before its members bound); it will be "
        "retried",
        key, id));
  }
  const int rank = gang->RankOf(args.pod_uid);
  if (rank < 0) {
    return EncodeBindingResult(
        fmt::format("pod {} has no seat in gang {}; it will be retried", key, id));
  }
  const tracker::GangRank& seat = gang->ranks[static_cast<size_t>(rank)];
  if (seat.node != args.node) {
    return EncodeBindingResult(
        fmt::format("pod {} is rank {} of gang {}, whose seat is on node {}, "
                    "not {}",
                    key, rank, id, seat.node, args.node));
  }
  claims::AllocationRecord record;
  auto annotations = BindingAnnotations(member, seat.seat, args.node, &record);

  claims::GangRecord gang_record;
  gang_record.gang = id;
  gang_record.size = gang->size;
  gang_record.group_nodes = gang->group_nodes;
  gang_record.rank = rank;
  gang_record.nodes = gang->Nodes();
  {
    ReaderLock lock(mu_);
    if (auto it = nodes_.find(args.node);
        it != nodes_.end() && it->second.ultraserver && gang->group_nodes > 1) {
      gang_record.server_id = it->second.ultraserver->GroupId(gang->group_nodes);
      gang_record.node_id = it->second.ultraserver->NodeId(gang->group_nodes);
    }
    if (auto it = pods_.find(gang->ranks.front().member_uid); it != pods_.end()) {
      gang_record.rank0_host = it->second.host;
    }
  }
  if (gang_record.rank0_host.empty()) {
    spdlog::warn(
        "bind {}: rank 0 of gang {} has no known host name (no pod seated yet, or no "
        "hostname/subdomain); NEURON_GLOBAL_TOPOID0_HOST is left unset",
        key, id);
  }
  annotations[std::string(claims::kAnnotationGangRecord)] = claims::EncodeGangRecord(gang_record);

  if (auto s = writer_.BindWithOutcome(args.pod_namespace, args.pod_name, args.pod_uid, args.node,
                                       annotations);
      !s.ok()) {
    // The seat stays the gang's: the member is retried onto it. A write whose outcome is unknown
    // may still land: the seats then outlive it too, and the pod watch makes the seat the pod's
    // hold when the Binding shows (UpsertPod, CommitGangMember), so no one else gets its ids.
    metrics_.CountApiError(s.unknown() ? "bind_unknown" : "bind");
    if (s.unknown()) {
      if (auto extended = tracker_.ExtendGang(
              id, SteadyNsAfter(options_.unknown_write_settle + options_.reservation_timeout));
          !extended.ok()) {
        spdlog::error("bind {}: gang {}'s seats ran out while its Binding was written: {}", key, id,
                      extended.error());
      }
    }
    spdlog::warn("bind {} (rank {} of gang {}) to {} failed, its seat stays held: {}", key, rank,
                 id, args.node, s.error);
    return EncodeBindingResult(s.error);
  }
  // The seat becomes the pod's hold; a seat that ran out during the write is held again as written.
  tracker::PodAllocation written = seat.seat;
  written.node = args.node;
  auto committed = tracker_.CommitGangMember(id, args.pod_uid, key, args.node);
  EnsureHeldAsWritten(committed.ok() ? OkStatus() : Status(Error{committed.error()}), args.pod_uid,
                      key, written);
  const tracker::TrackerStats stats = tracker_.Stats();
  metrics_.SetOutstandingReservations(stats.reserved);
  metrics_.SetGangsHeld(stats.gangs);
  if (!tracker_.HoldsGang(id)) metrics_.CountGangOutcome("bound");  // this was its last member
  for (const auto& c : record.containers) metrics_.CountAllocation(c.resource);
  {
    MutexLock lock(mu_);
    if (auto it = pods_.find(args.pod_uid); it != pods_.end()) {
      MarkBoundLocked(it->second, args.node);
      it->second.gang_record = gang_record;
    }
  }
  spdlog::info("bound {} to {} as rank {} of gang {}: {}", key, args.node, rank, id,
               annotations.at(std::string(claims::kAnnotationNeuronIds)));
  return EncodeBindingResult("");
}

void ExtenderService::RestoreGangs() {
  // One member per gang id is enough to build its request (GangRequestFor reads them all).
  std::vector<PodRequests> firsts;
  {
    ReaderLock lock(mu_);
    for (const auto& [id, uids] : gang_members_) {
      for (const auto& uid : uids) {
        auto it = pods_.find(uid);
        if (it != pods_.end() && it->second.gang_record && !it->second.node_name.empty()) {
          firsts.push_back(it->second);
          break;
        }
      }
    }
  }
  const int64_t deadline = SteadyNsAfter(options_.gang_timeout);
  for (const auto& member : firsts) {
    if (tracker_.HoldsGang(member.gang->id)) continue;
    tracker::GangRequest request = GangRequestFor(member, member.gang_record->size);
    if (static_cast<int>(request.bound.size()) >= request.size) continue;  // complete
    auto reserved = tracker_.ReserveGang(request, request.fixed_nodes, deadline);
    if (reserved.ok()) {
      metrics_.SetGangsHeld(tracker_.Stats().gangs);
      spdlog::info(
          "gang {}: {} of {} members bound before the restart; the others' seats are "
          "held again on their recorded nodes",
          request.id, request.bound.size(), request.size);
    } else {
      spdlog::warn("gang {}: cannot hold its missing members' seats after the restart: {}",
                   request.id, reserved.error());
    }
  }
}

}  // namespace toposched::extender
