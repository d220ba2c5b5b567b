// Keeping the tracker in step with the cluster: nodes and pods from the informers (or the
// offline file), the tracker rebuilt from the pods' own records after a start, and the partition
// service reconciled with the live pods.
#include <algorithm>
#include <iterator>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "claims/keys.h"
#include "extender/service.h"

namespace toposched::extender {

using topology::Unit;

namespace {
// NEURON_ALLOC_TIME, or 0: the earliest allocation keeps contested ids.
int64_t AllocTimeOf(const kube::Pod& pod) {
  if (auto t = pod.annotations.find(claims::kAnnotationAllocTime); t != pod.annotations.end()) {
    auto parsed = claims::ParseAllocTime(t->second);
    if (parsed.ok()) return *parsed;
  }
  return 0;
}
}  // namespace

bool ExtenderService::KnowsNode(const std::string& node) const {
  ReaderLock lock(mu_);
  return nodes_.count(node) != 0;
}

void ExtenderService::AdoptUnplaced(const std::string& node) {
  std::vector<kube::Pod> pods;
  {
    MutexLock lock(mu_);
    auto it = unplaced_.find(node);
    if (it == unplaced_.end()) return;
    for (auto& entry : it->second) pods.push_back(std::move(entry.second));
    unplaced_.erase(it);
  }
  std::stable_sort(pods.begin(), pods.end(), [](const kube::Pod& a, const kube::Pod& b) {
    return AllocTimeOf(a) < AllocTimeOf(b);
  });
  int adopted = 0;
  for (const auto& pod : pods) {
    auto rec = RecordedFromPod(pod);
    if (!rec.ok()) {
      ReportProblem(pod.uid, pod.Key(), "AllocationRecordInvalid", rec.error());
      continue;
    }
    if (auto p = pod.annotations.find(kAnnotationPartition); p != pod.annotations.end()) {
      MutexLock lock(mu_);
      annotated_[pod.uid] = {pod.Key(), p->second};
    }
    // The tracker does not know the node yet: the hold is parked and taken with the node.
    if (auto s = AdoptHold(*rec); !s.ok()) {
      metrics_.CountRebuildConflicts(1);
      ReportProblem(pod.uid, pod.Key(), "AllocationConflict",
                    fmt::format("toposched could not restore this pod's devices: {}", s.error()));
      continue;
    }
    ++adopted;
  }
  spdlog::info("node {} is known: {} of the {} pods seen bound to it before are adopted", node,
               adopted, pods.size());
}

void ExtenderService::LearnNode(const kube::Node& node) {
  if (!HasFacts(node)) return;
  std::optional<NodeFacts> previous;  // the last known LNC is kept without new evidence
  bool known = false;
  {
    ReaderLock lock(mu_);
    if (auto it = nodes_.find(node.name); it != nodes_.end()) {
      previous = it->second;
      known = true;
    } else if (auto parked = not_offered_.find(node.name); parked != not_offered_.end()) {
      previous = parked->second.facts;
    }
  }
  const bool dra = claims::ManagedByDra(node.labels);
  const std::string_view dra_held = claims::DraClaimsHeld(node.labels);
  if (dra || !dra_held.empty()) {
    // The DRA driver hands out this node's devices, or its claims still hold some (the label
    // was just removed): none is offered. The holds of its running pods are parked, not dropped
    // (RemoveNode), and taken back, at the LNC they were taken at, when it is offered again.
    if (known) {
      spdlog::info("node {} is labelled {}={}: DRA {} its devices; not offering it", node.name,
                   dra ? claims::kLabelNeuronManagement : claims::kLabelDraClaimsHeld,
                   dra ? claims::kNeuronManagementDra : dra_held,
                   dra ? "hands out" : "claims still hold");
      DeleteNode(node);
    }
    MutexLock lock(mu_);
    NotOffered& entry = not_offered_[node.name];
    entry.facts = previous;
    entry.dra_held = dra ? std::string() : std::string(dra_held);
    return;
  }
  {
    MutexLock lock(mu_);
    not_offered_.erase(node.name);
  }
  // A Node object deleted and re-created while its pods run (kubelet re-registering) may lack
  // the evidence of its LNC for a while: the facts it had when its pods' holds were parked stand
  // for the last known ones (issue 29).
  std::optional<NodeFacts> last_known = previous;
  if (!last_known) {
    if (std::optional<tracker::NodeInfo> departed = tracker_.DepartedNode(node.name)) {
      last_known.emplace();
      last_known->instance_type = departed->instance_type;
      last_known->pool = departed->pool;
      last_known->lnc = departed->lnc;
      spdlog::info("node {} is back while pods' holds are parked for it; last known: {} LNC {}",
                   node.name, departed->instance_type, departed->lnc);
    }
  }
  NodeFacts facts = FactsOf(node, catalog_, options_.pools, options_.resources,
                            last_known ? &*last_known : nullptr);
  if (known && previous->SameNode(facts)) return;
  if (node.instance_type.empty() && facts.pool.empty()) {
    spdlog::debug("node {} has no instance-type label; pods asking for accelerators fail there",
                  node.name);
  }
  // Pods seen bound to it before it was known go in first, so that the node and their holds
  // reach the tracker in one step (Tracker::UpsertNode takes parked holds back). Their records
  // are read with these facts; the tracker's shape corrects them below.
  {
    MutexLock lock(mu_);
    nodes_[node.name] = facts;
  }
  AdoptUnplaced(node.name);
  if (auto s = tracker_.UpsertNode({node.name, node.instance_type, facts.lnc, facts.pool,
                                    facts.Groups(), facts.out_of_service});
      !s.ok()) {
    spdlog::warn("{}", s.error());
  }
  const topology::DeviceMask before = known ? previous->out_of_service : 0;
  if (before != facts.out_of_service) {
    TellPodsOnChangedDevices(node.name, facts.out_of_service & ~before,
                             before & ~facts.out_of_service, facts.out_of_service_why);
  }
  // One source: the tracker may keep the old shape (pods hold ids on the node), and core ids
  // must then be read with the shape it uses, not the new facts'.
  if (auto held = tracker_.Snapshot(node.name)) {
    facts.lnc = held->info.lnc;
    facts.cores_per_device = held->shape.cores_per_device;
  }
  MutexLock lock(mu_);
  nodes_[node.name] = facts;
}

void ExtenderService::ReplaceNodes(const std::vector<kube::Node>& nodes) {
  std::vector<std::string> gone;
  {
    ReaderLock lock(mu_);
    auto listed = [&](const std::string& name) {
      return std::any_of(nodes.begin(), nodes.end(),
                         [&](const kube::Node& n) { return n.name == name; });
    };
    for (const auto& entry : nodes_) {
      if (!listed(entry.first)) gone.push_back(entry.first);
    }
    for (const auto& entry : not_offered_) {
      if (!listed(entry.first)) gone.push_back(entry.first);
    }
  }
  for (const auto& name : gone) {
    kube::Node node;
    node.name = name;
    DeleteNode(node);
  }
  for (const auto& node : nodes) LearnNode(node);
  nodes_synced_ = true;
}

void ExtenderService::UpsertNode(const kube::Node& node) { LearnNode(node); }

void ExtenderService::DeleteNode(const kube::Node& node) {
  {
    MutexLock lock(mu_);
    nodes_.erase(node.name);
    not_offered_.erase(node.name);
  }
  // Its pods' holds are parked, not dropped: a Node object deleted and re-created does not stop
  // them (the pods' own deletions, or a relist, end their holds).
  tracker_.RemoveNode(node.name);
}

void ExtenderService::BeginPodList() {
  pod_list_mark_ = tracker_.Generation();
  pod_list_marked_ = true;
}

Result<tracker::RecordedPod> ExtenderService::RecordedFromPod(const kube::Pod& pod) const {
  // toposched.io/allocation, else AWS_NEURON_IDS as AWS's extender writes it, so that pods it
  // placed count as used after a switch to toposched.
  TOPOSCHED_ASSIGN_OR_RETURN(auto record, claims::RecordFromPod(pod, options_.resources.Specs()));
  if (record.node != pod.node_name) {
    return Error{fmt::format("allocation record names node {} but the pod runs on {}", record.node,
                             pod.node_name)};
  }
  int cores_per_device = 0;
  {
    ReaderLock lock(mu_);
    auto nit = nodes_.find(pod.node_name);
    if (nit == nodes_.end()) return Error{fmt::format("node {} is not known", pod.node_name)};
    cores_per_device = nit->second.cores_per_device;
  }
  if (cores_per_device == 0) {
    return Error{fmt::format("node {} has an unknown instance type", pod.node_name)};
  }
  tracker::RecordedPod recorded{pod.uid, pod.Key(), {pod.node_name, {}}};
  for (const auto& c : record.containers) {
    const bool device =
        std::find(options_.resources.device.begin(), options_.resources.device.end(), c.resource) !=
        options_.resources.device.end();
    const bool core = std::find(options_.resources.core.begin(), options_.resources.core.end(),
                                c.resource) != options_.resources.core.end();
    if (!device && !core) {
      return Error{fmt::format("allocation record names unmanaged resource '{}'", c.resource)};
    }
    auto p =
        topology::Placement::FromIds(device ? Unit::kDevice : Unit::kCore, c.ids, cores_per_device);
    std::sort(p.ids.begin(), p.ids.end());
    for (int id : p.ids) {
      const int d = device ? id : id / cores_per_device;
      if (id < 0 || d >= topology::kMaxDevices) {
        return Error{fmt::format("allocation record has id {} out of range", id)};
      }
    }
    recorded.allocation.containers.push_back({c.container, std::move(p)});
  }
  return recorded;
}

ExtenderService::PodListScan ExtenderService::ScanPods(std::span<kube::Pod> pods) const {
  PodListScan scan;
  scan.alive.reserve(pods.size());
  scan.requests.reserve(pods.size());
  scan.recorded.reserve(pods.size());
  for (kube::Pod& pod : pods) {
    ScanPod(pod, scan);
    pod = kube::Pod{};  // read: what the scan needs of it is copied; its memory serves the scan
  }
  return scan;
}

void ExtenderService::ScanPod(const kube::Pod& pod, PodListScan& scan) const {
  if (pod.Terminated()) return;
  scan.alive.insert(pod.uid);
  if (partitions_) scan.listed.emplace(pod.uid, pod.Key());
  auto requests = RequestsOf(pod, options_.resources);
  if (!requests.ok() || !requests->spec.AsksForAnything()) return;
  scan.requests[pod.uid] = std::move(requests).value();
  if (pod.node_name.empty()) return;
  if (!KnowsNode(pod.node_name)) {
    // Adopted when its node is learned; until then the node is unknown to filter and bind.
    if (claims::HasAllocation(pod)) {
      scan.unplaced[pod.node_name][pod.uid] = pod;
      ++scan.unplaced_count;
    }
    return;
  }
  auto rec = RecordedFromPod(pod);
  if (!rec.ok()) {
    if (claims::HasAllocation(pod)) scan.invalid.push_back({pod.uid, pod.Key(), rec.error()});
    return;
  }
  const int64_t at = AllocTimeOf(pod);
  if (auto p = pod.annotations.find(kAnnotationPartition); p != pod.annotations.end()) {
    scan.annotated[pod.uid] = {pod.Key(), p->second};
  }
  scan.recorded.emplace_back(at, std::move(rec).value());
}

void ExtenderService::PodListScan::Append(PodListScan&& later) {
  // Node handles move between the maps: no key or value is copied.
  alive.merge(later.alive);
  requests.merge(later.requests);
  annotated.merge(later.annotated);
  listed.merge(later.listed);
  for (auto& [node, pods] : later.unplaced) unplaced[node].merge(pods);
  unplaced_count += later.unplaced_count;
  recorded.insert(recorded.end(), std::make_move_iterator(later.recorded.begin()),
                  std::make_move_iterator(later.recorded.end()));
  invalid.insert(invalid.end(), std::make_move_iterator(later.invalid.begin()),
                 std::make_move_iterator(later.invalid.end()));
}

ExtenderService::PodListScan ExtenderService::ScanPodList(std::vector<kube::Pod>& pods) const {
  // A first list of a large cluster (1,000,000 pods) is read on two threads, each pod on its own;
  // a small one (every relist of a test, a quiet cluster) is not worth a thread.
  constexpr size_t kSplitAt = 20000;
  const std::span<kube::Pod> all(pods);
  if (pods.size() < kSplitAt) return ScanPods(all);
  const size_t half = pods.size() / 2;
  PodListScan later;
  std::thread second([&] { later = ScanPods(all.subspan(half)); });
  PodListScan scan = ScanPods(all.first(half));
  second.join();
  // The first half's order comes first: the stable sort below keeps the list's order on ties.
  scan.Append(std::move(later));
  return scan;
}

void ExtenderService::ReplacePods(std::vector<kube::Pod> pods) {
  // Holds taken after the list was requested are newer than it (without BeginPodList: after
  // now, i.e. none).
  const uint64_t listed_at =
      pod_list_marked_.exchange(false) ? pod_list_mark_.load() : tracker_.Generation();
  const size_t listed = pods.size();
  PodListScan scan = ScanPodList(pods);
  std::vector<kube::Pod>().swap(pods);  // every pod was freed as it was read; now the array
  for (const auto& problem : scan.invalid) {
    ReportProblem(problem.uid, problem.pod_key, "AllocationRecordInvalid", problem.message);
  }
  const int invalid = static_cast<int>(scan.invalid.size());
  const size_t unplaced_count = scan.unplaced_count;
  std::vector<std::pair<int64_t, tracker::RecordedPod>>& recorded = scan.recorded;
  // The earliest allocation keeps contested ids; later claims are reported.
  std::stable_sort(recorded.begin(), recorded.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<tracker::RecordedPod> ordered;
  ordered.reserve(recorded.size());
  for (auto& r : recorded) ordered.push_back(std::move(r.second));
  std::vector<std::string> unplaced_nodes;
  {
    MutexLock lock(mu_);
    pods_ = std::move(scan.requests);
    std::erase_if(contested_,
                  [&](const auto& entry) { return scan.alive.count(entry.first) == 0; });
    annotated_ = std::move(scan.annotated);
    listed_ = std::move(scan.listed);
    unplaced_ = std::move(scan.unplaced);
    for (const auto& entry : unplaced_) unplaced_nodes.push_back(entry.first);
    gang_members_.clear();
    waiting_.clear();
    for (const auto& [uid, requests] : pods_) {
      if (requests.gang) gang_members_[requests.gang->id].insert(uid);
      CountWaitingLocked(requests, +1);
    }
    // A loop, not erase_if: the thread-safety analysis cannot see mu_ held inside a lambda.
    for (auto it = gang_sizes_.begin(); it != gang_sizes_.end();) {
      it = gang_members_.contains(it->first) ? std::next(it) : gang_sizes_.erase(it);
    }
    for (auto it = gang_failures_.begin(); it != gang_failures_.end();) {
      for (auto member = it->second.begin(); member != it->second.end();) {
        member = pods_.contains(*member) ? std::next(member) : it->second.erase(member);
      }
      it = it->second.empty() ? gang_failures_.erase(it) : std::next(it);
    }
  }
  tracker::RebuildScope scope;
  scope.keep_reservations = true;
  scope.listed_at = listed_at;
  scope.alive = &scan.alive;
  // Pods adopted after their node was learned with failed devices (after a restart) are
  // told now; those the tracker held already were told with the node.
  const FirstHolds first = FirstHoldsOnFailedDevices(ordered);
  const tracker::RebuildReport report = tracker_.Rebuild(ordered, scope);
  for (const auto& problem : report.problems) {
    ReportProblem(
        problem.uid, problem.name, "AllocationConflict",
        fmt::format("toposched could not restore this pod's devices: {}", problem.message));
  }
  metrics_.CountRebuildConflicts(static_cast<int>(report.problems.size()) + invalid);
  TellFirstHolds(first);
  spdlog::info(
      "rebuilt from {} pods: {} allocations restored, {} reservations kept, {} newer holds kept, "
      "{} holds of pods gone dropped, {} pods waiting for their node, {} problems",
      listed, report.applied, report.reservations_kept, report.newer_kept, report.dropped,
      unplaced_count, report.problems.size() + invalid);
  // A node learned while the list was being read missed these pods: adopt them now.
  for (const auto& node : unplaced_nodes) {
    if (KnowsNode(node)) AdoptUnplaced(node);
  }
  RestoreGangs();
  pods_synced_ = true;
  if (!partitions_synced_) {
    if (auto s = ReconcilePartitions(); !s.ok()) spdlog::error("{}; retrying", s.error());
  }
}

void ExtenderService::UpsertPod(const kube::Pod& pod) {
  if (pod.Terminated()) {
    DeletePod(pod);
    return;
  }
  if (partitions_) {
    MutexLock lock(mu_);
    listed_.try_emplace(pod.uid, pod.Key());
  }
  auto requests = RequestsOf(pod, options_.resources);
  if (!requests.ok() || !requests->spec.AsksForAnything()) return;
  const std::string gang =
      requests->gang && requests->gang_record ? requests->gang_record->gang : std::string();
  RememberPod(std::move(requests).value());
  if (pod.node_name.empty()) return;
  {
    // Checked and kept under one lock, so a node learned meanwhile adopts it (AdoptUnplaced).
    MutexLock lock(mu_);
    if (nodes_.count(pod.node_name) == 0) {
      if (claims::HasAllocation(pod)) unplaced_[pod.node_name][pod.uid] = pod;
      return;
    }
  }
  auto rec = RecordedFromPod(pod);
  if (!rec.ok()) {
    if (claims::HasAllocation(pod)) {
      ReportProblem(pod.uid, pod.Key(), "AllocationRecordInvalid", rec.error());
    }
    return;
  }
  if (auto p = pod.annotations.find(kAnnotationPartition); p != pod.annotations.end()) {
    MutexLock lock(mu_);
    annotated_[pod.uid] = {pod.Key(), p->second};
  }
  // A gang member whose Binding the watch shows before its bind commits: its seat becomes its
  // hold (adopting would collide with the seat's ids).
  if (!gang.empty() && tracker_.CommitGangMember(gang, pod.uid, pod.Key(), pod.node_name).ok()) {
    return;
  }
  // Our own bind seen again, or a pod bound by another replica / before a restart: adopt it.
  if (auto s = AdoptHold(*rec); !s.ok()) {
    metrics_.CountRebuildConflicts(1);
    ReportProblem(pod.uid, pod.Key(), "AllocationConflict", s.error());
    MutexLock lock(mu_);
    contested_[pod.uid] = pod;
  } else {
    {
      MutexLock lock(mu_);
      contested_.erase(pod.uid);
    }
    // The adopted record may have moved this pod off ids a contested record waits for.
    AdoptContested();
  }
}

void ExtenderService::AdoptContested() {
  std::vector<kube::Pod> pods;
  {
    ReaderLock lock(mu_);
    if (contested_.empty()) return;
    for (const auto& entry : contested_) pods.push_back(entry.second);
  }
  for (const kube::Pod& pod : pods) {
    auto rec = RecordedFromPod(pod);
    if (!rec.ok()) continue;              // reported when it was seen
    if (!AdoptHold(*rec).ok()) continue;  // still held by another pod: reported already
    spdlog::info("pod {}: its recorded ids on {} are held now that the conflicting hold is gone",
                 pod.Key(), pod.node_name);
    MutexLock lock(mu_);
    // Unless the pod was seen again (or deleted) meanwhile: that version decides.
    if (auto it = contested_.find(pod.uid);
        it != contested_.end() && it->second.resource_version == pod.resource_version) {
      contested_.erase(it);
    }
  }
}

void ExtenderService::DeletePod(const kube::Pod& pod) {
  ForgetPod(pod.uid);
  {
    MutexLock lock(mu_);
    annotated_.erase(pod.uid);
    listed_.erase(pod.uid);
    if (auto it = unplaced_.find(pod.node_name); it != unplaced_.end()) {
      it->second.erase(pod.uid);
      if (it->second.empty()) unplaced_.erase(it);
    }
  }
  {
    MutexLock lock(mu_);
    contested_.erase(pod.uid);
  }
  // A pod in a shared pool keeps its ids until its partition is gone.
  if (partitions_ && partitions_->PodDeleted(pod.uid)) return;
  tracker_.Forget(pod.uid);
  AdoptContested();
}

Status ExtenderService::ReconcilePartitions() {
  if (options_.provisioner == nullptr || !pods_synced_) return OkStatus();
  if (options_.may_reconcile && !options_.may_reconcile()) return OkStatus();  // a standby
  auto listed = partitions_->service().List();
  if (!listed.ok()) {
    return Error{
        fmt::format("cannot list partitions to reconcile them after a start: {}", listed.error())};
  }
  std::unordered_map<std::string, std::pair<std::string, std::string>> annotated;
  {
    ReaderLock lock(mu_);
    annotated = annotated_;
  }
  std::unordered_set<std::string> present;
  int orphans = 0;
  int kept_for_live = 0;
  for (const auto& p : *listed) {
    present.insert(p.name);
    const std::string owner = provision::OwnerOf(p.name);
    if (owner.empty()) continue;  // not ours
    auto hold = tracker_.Find(owner);
    if (hold && hold->state != tracker::HoldState::kReleasing) continue;  // a live pod owns it
    if (hold) continue;                                                   // already being removed
    // An orphan is a partition whose owner pod is gone, not one whose owner holds nothing: a
    // live pod whose hold failed to rebuild (a conflict, a record we cannot read) still runs on
    // it. Its devices are held until the pod is deleted and the partition removed.
    // Alive means listed, whatever the pod asks for: a pod asking a resource the current flags
    // do not manage (an upgrade renamed --device-resource) still runs on its partition.
    std::string owner_key;
    bool managed = false;
    {
      ReaderLock lock(mu_);
      if (auto it = pods_.find(owner); it != pods_.end()) {
        owner_key = it->second.spec.name;
        managed = true;
      } else if (auto listed_it = listed_.find(owner); listed_it != listed_.end()) {
        owner_key = listed_it->second;
      }
    }
    if (!owner_key.empty()) {
      ++kept_for_live;
      if (auto s = tracker_.HoldReleasing(owner, owner_key, p.pool, p.ipus); !s.ok()) {
        metrics_.CountTrackerError("hold_live_partition");
        spdlog::warn("partition {} of live pod {}: {}", p.name, owner_key, s.error());
      }
      ReportProblem(
          owner, owner_key, "PartitionKept",
          managed ? fmt::format("partition {} is kept for this running pod although its devices "
                                "could not be restored from its record; they stay held until "
                                "the pod is deleted",
                                p.name)
                  : fmt::format("partition {} is kept for this running pod, which asks for no "
                                "resource this extender manages (devices: {}; cores: {}): was "
                                "--device-resource or --core-resource renamed? Its devices stay "
                                "held until the pod is deleted",
                                p.name, fmt::join(options_.resources.device, ","),
                                fmt::join(options_.resources.core, ",")));
      continue;
    }
    ++orphans;
    spdlog::info("partition {} (pool {}) has no live pod; removing it", p.name, p.pool);
    partitions_->RemoveOrphan(p);
  }
  for (const auto& [uid, named] : annotated) {
    if (present.count(named.second) != 0) continue;
    ReportProblem(uid, named.first, "PartitionMissing",
                  fmt::format("partition {} recorded on this pod no longer exists at the "
                              "partition service; the pod has no accelerators and should be "
                              "recreated",
                              named.second));
  }
  spdlog::info("reconciled {} partitions: {} orphans being removed, {} kept for live pods",
               listed->size(), orphans, kept_for_live);
  partitions_synced_ = true;
  return OkStatus();
}

}  // namespace toposched::extender
