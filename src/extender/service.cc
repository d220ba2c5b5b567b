#include "extender/service.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/annotations.h"
#include "claims/keys.h"
#include "kube/allocation_record.h"

namespace toposched::extender {
namespace {

using topology::Unit;

// The LNC a Trn2 node runs at, read off the core count its device plugin advertises.
int LncFromAllocatable(const topology::InstanceType& type, const kube::Node& node,
                       const ResourceNames& names) {
  if (!type.has_lnc) return 0;
  for (const auto& resource : names.core) {
    auto it = node.allocatable.find(resource);
    if (it == node.allocatable.end()) continue;
    for (int lnc : type.lnc.allowed) {
      if (it->second == int64_t{type.devices} * (type.lnc.physical_cores_per_device / lnc)) {
        return lnc;
      }
    }
  }
  return type.lnc.default_lnc;
}

}  // namespace

ExtenderService::ExtenderService(const topology::Catalog& catalog, ExtenderOptions options,
                                 ClusterWriter& writer, Metrics& metrics, Clock steady_ns,
                                 Clock wall_ns)
    : catalog_(catalog),
      options_(std::move(options)),
      writer_(writer),
      metrics_(metrics),
      steady_ns_(std::move(steady_ns)),
      wall_ns_(std::move(wall_ns)),
      tracker_(catalog, options_.policy, options_.pools) {
  if (options_.provisioner != nullptr) {
    reaper_ = std::make_unique<provision::Reaper>(*options_.provisioner, options_.removal_retry);
    partitions_synced_ = false;
  }
}

void ExtenderService::LearnNode(const kube::Node& node) {
  if (node.resource_version.empty() && node.labels.empty() && node.allocatable.empty()) {
    // A stripped Node, e.g. our own filter answer handed back by kube-scheduler: no facts in it.
    return;
  }
  NodeFacts facts;
  facts.instance_type = node.instance_type;
  if (auto label = node.labels.find(claims::kPoolLabel); label != node.labels.end()) {
    facts.pool = label->second;
    // The node's accelerators are the pool's; its own instance type does not matter here.
    if (const topology::PoolDef* def =
            options_.pools != nullptr ? options_.pools->Find(facts.pool) : nullptr) {
      facts.cores_per_device = def->shape_type->cores_per_device;
    }
  } else if (const auto* type = catalog_.Find(node.instance_type)) {
    facts.lnc = LncFromAllocatable(*type, node, options_.resources);
    auto shape = topology::NodeShape::Make(*type, facts.lnc);
    if (shape.ok()) facts.cores_per_device = shape->cores_per_device;
    for (const auto& resource : options_.resources.device) {
      auto it = node.allocatable.find(resource);
      if (it != node.allocatable.end() && it->second < type->devices) {
        // kube-scheduler's own count check against allocatable still applies; say why it bites.
        spdlog::warn(
            "node {} ({}) advertises {} of {} {}: some devices are unhealthy or not "
            "registered yet",
            node.name, node.instance_type, it->second, type->devices, resource);
      }
    }
  }
  {
    std::unique_lock lock(mu_);
    auto it = nodes_.find(node.name);
    if (it != nodes_.end() && it->second.instance_type == facts.instance_type &&
        it->second.lnc == facts.lnc && it->second.pool == facts.pool) {
      return;
    }
    nodes_[node.name] = facts;
  }
  if (node.instance_type.empty() && facts.pool.empty()) {
    spdlog::debug("node {} has no instance-type label; pods asking for accelerators fail there",
                  node.name);
  }
  if (auto s = tracker_.UpsertNode({node.name, node.instance_type, facts.lnc, facts.pool});
      !s.ok()) {
    spdlog::warn("{}", s.error());
  }
}

void ExtenderService::RememberPod(PodRequests requests) {
  bool first_seen = false;
  tracker::PodSpec spec;
  {
    std::unique_lock lock(mu_);
    auto [it, inserted] = pods_.try_emplace(requests.spec.uid);
    if (inserted) spec = requests.spec;
    first_seen = inserted;
    it->second = std::move(requests);
  }
  // Each pod counts once into the demand the scarcity policy protects, however often
  // kube-scheduler retries it, and whether the watch or filter shows it first.
  if (first_seen) tracker_.ObserveDemand(spec);
}

std::string ExtenderService::Filter(const ExtenderArgs& args) {
  FilterResult result;
  result.node_names_form = args.node_names.has_value();
  const std::vector<std::string>& names = args.CandidateNames();
  auto requests = RequestsOf(args.pod, options_.resources);
  if (!requests.ok()) {
    for (const auto& n : names) result.failed_unresolvable[n] = requests.error();
    return EncodeFilterResult(result);
  }
  if (!requests->spec.AsksForAnything()) {
    result.passed.assign(names.begin(), names.end());  // not ours: every node passes untouched
    return EncodeFilterResult(result);
  }
  if (!Ready()) {
    // Resolvable, so kube-scheduler retries the pod once we know what is taken.
    for (const auto& n : names) result.failed[n] = std::string(kNotReadyReason);
    return EncodeFilterResult(result);
  }
  result.passed.reserve(names.size());
  if (args.nodes) {
    for (const auto& node : *args.nodes) LearnNode(node);
  }
  tracker_.ForEachFit(requests->spec, names, [&](size_t i, tracker::FitResult&& fit) {
    if (fit.fits) {
      result.passed.push_back(names[i]);
    } else if (fit.unresolvable) {
      result.failed_unresolvable[names[i]] = std::move(fit.reason);
    } else {
      result.failed[names[i]] = std::move(fit.reason);
    }
  });
  RememberPod(std::move(requests).value());
  return EncodeFilterResult(result);
}

std::string ExtenderService::Prioritize(const ExtenderArgs& args) {
  const std::vector<std::string>& names = args.CandidateNames();
  std::vector<HostPriority> priorities;
  priorities.reserve(names.size());
  auto requests = RequestsOf(args.pod, options_.resources);
  if (!requests.ok() || !requests->spec.AsksForAnything()) {
    for (const auto& n : names) priorities.push_back({n, 0});
    return EncodeHostPriorityList(priorities);
  }
  if (args.nodes) {
    for (const auto& node : *args.nodes) LearnNode(node);
  }
  // The simulator's node choice, scored: 10 for the one node the policy picks (bind then takes
  // the same set there), 1-9 for the rest that fit, 0 for the others.
  const tracker::Ranking ranking = tracker_.Rank(requests->spec, names);
  for (size_t i = 0; i < names.size(); ++i) priorities.push_back({names[i], ranking.scores[i]});
  return EncodeHostPriorityList(priorities);
}

std::string ExtenderService::Bind(const BindingArgs& args) {
  const std::string key = args.pod_namespace + "/" + args.pod_name;
  if (!Ready()) return EncodeBindingResult(fmt::format("bind {}: {}", key, kNotReadyReason));
  PodRequests requests;
  {
    std::shared_lock lock(mu_);
    auto it = pods_.find(args.pod_uid);
    if (it == pods_.end()) {
      return EncodeBindingResult(fmt::format(
          "pod {} (uid {}) is not known to toposched: it was neither seen by the pod watch nor "
          "passed through filter; it will be retried",
          key, args.pod_uid));
    }
    requests = it->second;
  }
  if (!requests.node_name.empty()) {
    return EncodeBindingResult(
        fmt::format("pod {} is already bound to node {}", key, requests.node_name));
  }
  if (!requests.spec.AsksForAnything()) {
    // Managed pods with zero counts: bind without ids.
    if (auto s = writer_.Bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node, {});
        !s.ok()) {
      metrics_.CountApiError("bind");
      return EncodeBindingResult(s.error());
    }
    return EncodeBindingResult("");
  }
  // The reservation outlives the slowest Binding write the client allows, so that expiry never
  // frees ids a write still in flight is about to give the pod.
  const int64_t deadline = steady_ns_() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              options_.reservation_timeout + writer_.MaxWriteTime())
                                              .count();
  // A shared pool's devices exist for the pod only once its partition does. The bind is marked
  // as provisioning before it reserves, so a deletion racing it always leaves cleanup to it.
  const std::string pool =
      options_.provisioner != nullptr ? tracker_.PoolOf(args.node) : std::string();
  if (!pool.empty()) {
    std::lock_guard lock(prov_mu_);
    if (!provisioning_.insert(args.pod_uid).second) {
      return EncodeBindingResult(
          fmt::format("pod {} is already being bound (its partition is being made)", key));
    }
  }
  auto reserved = tracker_.Reserve(requests.spec, args.node, deadline);
  if (!reserved.ok()) {
    if (!pool.empty()) {
      std::lock_guard lock(prov_mu_);
      provisioning_.erase(args.pod_uid);
    }
    spdlog::info("bind {} to {} refused: {}", key, args.node, reserved.error());
    return EncodeBindingResult(reserved.error());
  }
  metrics_.SetOutstandingReservations(tracker_.Stats().reserved);

  std::string partition;
  if (!pool.empty()) {
    partition = provision::PartitionNameFor(args.pod_uid);
    if (auto s = ProvisionPartition(args.pod_uid, key, pool, partition, *reserved); !s.ok()) {
      metrics_.SetOutstandingReservations(tracker_.Stats().reserved);
      return EncodeBindingResult(s.error());
    }
  }

  kube::AllocationRecord record;
  record.node = args.node;
  {
    std::shared_lock lock(mu_);
    if (auto it = nodes_.find(args.node); it != nodes_.end()) {
      record.instance_type = it->second.instance_type;
    }
  }
  // In kubelet's container order (init containers first), the order AWS_NEURON_IDS is read back
  // in; the tracker placed them largest first.
  for (const auto& want : requests.spec.containers) {
    const auto placed =
        std::find_if(reserved->containers.begin(), reserved->containers.end(), [&](const auto& c) {
          return c.container == want.name && c.placement.unit == want.request.unit;
        });
    if (placed == reserved->containers.end()) continue;
    record.containers.push_back({placed->container,
                                 requests.ResourceFor(placed->container, placed->placement.unit),
                                 placed->placement.ids});
  }
  auto annotations = claims::AllocationAnnotations(record, wall_ns_());
  if (!partition.empty()) annotations[std::string(kAnnotationPartition)] = partition;
  auto status =
      writer_.Bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node, annotations);
  if (!status.ok()) {
    metrics_.CountApiError("bind");
    if (partition.empty()) {
      if (auto rolled = tracker_.Rollback(args.pod_uid); !rolled.ok()) {
        // Expired meanwhile: the ids are free already, which is what a rollback wanted.
        metrics_.CountTrackerError("rollback");
        spdlog::warn("bind {} to {}: rollback after the failed write: {}", key, args.node,
                     rolled.error());
      }
      spdlog::warn("bind {} to {} failed, ids released: {}", key, args.node, status.error());
    } else {
      {
        std::lock_guard lock(prov_mu_);
        provisioning_.erase(args.pod_uid);
      }
      ReleasePartition(args.pod_uid, partition);
      spdlog::warn("bind {} to {} failed; partition {} removed: {}", key, args.node, partition,
                   status.error());
    }
    metrics_.SetOutstandingReservations(tracker_.Stats().reserved);
    return EncodeBindingResult(status.error());
  }
  if (partition.empty()) {
    auto committed = tracker_.Commit(args.pod_uid);
    if (!committed.ok()) {
      // Usually the pod watch saw the Binding first and adopted it: held as written, nothing to
      // do. Otherwise the reservation was lost during the write.
      const auto hold = tracker_.Find(args.pod_uid);
      if (hold && hold->state == tracker::HoldState::kCommitted &&
          hold->allocation.node == args.node) {
        committed = OkStatus();
      }
    }
    if (!committed.ok()) {
      // The pod is bound with these ids whatever the tracker says: hold exactly them again, or
      // say loudly that another pod got them meanwhile.
      metrics_.CountTrackerError("commit");
      auto adopted = tracker_.Adopt({args.pod_uid, key, *reserved});
      spdlog::error("bind {} to {}: the write succeeded but its reservation was gone ({}); {}", key,
                    args.node, committed.error(),
                    adopted.ok() ? "the recorded ids are held again" : adopted.error());
      if (!adopted.ok()) {
        metrics_.CountRebuildConflicts(1);
        ReportProblem(args.pod_uid, key, "AllocationConflict", adopted.error());
      }
    }
  } else {
    Status committed = OkStatus();
    {
      std::lock_guard lock(prov_mu_);
      committed = tracker_.Commit(args.pod_uid);
      provisioning_.erase(args.pod_uid);
    }
    if (!committed.ok()) {
      // Deleted while binding: DeletePod left the partition to us.
      ReleasePartition(args.pod_uid, partition);
      metrics_.SetOutstandingReservations(tracker_.Stats().reserved);
      return EncodeBindingResult(
          fmt::format("pod {} was deleted while binding; partition {} "
                      "removed",
                      key, partition));
    }
    std::unique_lock lock(mu_);
    annotated_[args.pod_uid] = {key, partition};
  }
  metrics_.SetOutstandingReservations(tracker_.Stats().reserved);
  for (const auto& c : record.containers) metrics_.CountAllocation(c.resource);
  {
    std::unique_lock lock(mu_);
    if (auto it = pods_.find(args.pod_uid); it != pods_.end()) it->second.node_name = args.node;
  }
  spdlog::info("bound {} to {}: {}", key, args.node,
               annotations.at(std::string(claims::kAnnotationNeuronIds)));
  return EncodeBindingResult("");
}

std::string ExtenderService::Preempt(const PreemptionArgs& args) {
  auto requests = RequestsOf(args.pod, options_.resources);
  if (!requests.ok() || !requests->spec.AsksForAnything()) {
    return EncodePreemptionResult(args.node_victims);  // not ours to judge
  }
  std::map<std::string, Victims> out;
  if (!Ready()) return EncodePreemptionResult(out);  // no victims for ids we cannot see yet
  for (const auto& [node, victims] : args.node_victims) {
    // Victims holding none of our ids were chosen for other resources (cpu, memory): keep them.
    // Among those holding ids, keep only the fewest that free a legal set.
    std::vector<std::string> holders;
    std::vector<std::string> others;
    for (const auto& uid : victims.pod_uids) {
      auto hold = tracker_.Find(uid);
      (hold && hold->allocation.node == node ? holders : others).push_back(uid);
    }
    auto fewest = tracker_.FewestVictims(requests->spec, node, holders);
    if (!fewest.ok()) {
      spdlog::debug("preempt {}: dropping node {}: {}", requests->spec.name, node, fewest.error());
      continue;
    }
    Victims kept{std::move(others), victims.num_pdb_violations};
    kept.pod_uids.insert(kept.pod_uids.end(), fewest->begin(), fewest->end());
    out[node] = std::move(kept);
  }
  return EncodePreemptionResult(out);
}

Status ExtenderService::ProvisionPartition(const std::string& uid, const std::string& key,
                                           const std::string& pool, const std::string& partition,
                                           const tracker::PodAllocation& allocation) {
  provision::Provisioner& provisioner = *options_.provisioner;
  // The reservation must outlive the whole provisioning step, however slow the service is.
  const auto budget = provisioner.options().create_timeout +
                      2 * provisioner.options().remove_timeout + options_.reservation_timeout;
  (void)tracker_.ExtendReservation(
      uid, steady_ns_() + std::chrono::duration_cast<std::chrono::nanoseconds>(budget).count());
  provision::Partition want;
  want.name = partition;
  want.pool = pool;
  topology::DeviceMask devices = 0;
  for (const auto& c : allocation.containers) devices |= c.placement.devices;
  want.ipus = topology::MaskToIds(devices);
  bool left_behind = false;
  auto created = provisioner.CreateAndWait(want, &left_behind);
  if (created.ok()) {
    spdlog::info("partition {} for {} is active (pool {}, ipus {})", partition, key, pool,
                 fmt::join(want.ipus, ","));
    return OkStatus();
  }
  metrics_.CountApiError("partition");
  {
    std::lock_guard lock(prov_mu_);
    provisioning_.erase(uid);
    if (left_behind) {
      (void)tracker_.BeginRelease(uid);
    } else {
      tracker_.Forget(uid);
    }
  }
  if (left_behind) {
    reaper_->Remove(partition, [this, uid] { tracker_.Forget(uid); });
  }
  spdlog::warn("bind {}: {}", key, created.error());
  return Error{fmt::format("pod {}: {}; {}", key, created.error(),
                           left_behind ? "its devices stay held until the partition is gone"
                                       : "its devices are released")};
}

void ExtenderService::ReleasePartition(const std::string& uid, const std::string& partition) {
  provision::Provisioner& provisioner = *options_.provisioner;
  (void)tracker_.BeginRelease(uid);
  if (provisioner.RemoveAndWait(partition, provisioner.options().remove_timeout).ok()) {
    tracker_.Forget(uid);
    return;
  }
  reaper_->Remove(partition, [this, uid] { tracker_.Forget(uid); });
}

Status ExtenderService::ReconcilePartitions() {
  if (options_.provisioner == nullptr || !pods_synced_) return OkStatus();
  if (options_.may_reconcile && !options_.may_reconcile()) return OkStatus();  // a standby
  auto listed = options_.provisioner->service().List();
  if (!listed.ok()) {
    return Error{
        fmt::format("cannot list partitions to reconcile them after a start: {}", listed.error())};
  }
  std::unordered_map<std::string, std::pair<std::string, std::string>> annotated;
  {
    std::shared_lock lock(mu_);
    annotated = annotated_;
  }
  std::unordered_set<std::string> present;
  int orphans = 0;
  for (const auto& p : *listed) {
    present.insert(p.name);
    const std::string owner = provision::OwnerOf(p.name);
    if (owner.empty()) continue;  // not ours
    auto hold = tracker_.Find(owner);
    if (hold && hold->state != tracker::HoldState::kReleasing) continue;  // a live pod owns it
    if (hold) continue;                                                   // already being removed
    ++orphans;
    const std::string hold_id = "partition/" + p.name;
    if (auto s = tracker_.HoldReleasing(hold_id, "partition " + p.name, p.pool, p.ipus); !s.ok()) {
      spdlog::warn("orphan {}", s.error());
    }
    spdlog::info("partition {} (pool {}) has no live pod; removing it", p.name, p.pool);
    reaper_->Remove(p.name, [this, hold_id] { tracker_.Forget(hold_id); });
  }
  for (const auto& [uid, named] : annotated) {
    if (present.count(named.second) != 0) continue;
    ReportProblem(uid, named.first, "PartitionMissing",
                  fmt::format("partition {} recorded on this pod no longer exists at the "
                              "partition service; the pod has no accelerators and should be "
                              "recreated",
                              named.second));
  }
  spdlog::info("reconciled {} partitions: {} orphans being removed", listed->size(), orphans);
  partitions_synced_ = true;
  return OkStatus();
}

void ExtenderService::ExpireReservations() {
  if (reaper_) metrics_.SetPartitionRemovalsPending(static_cast<int>(reaper_->Pending()));
  const auto expired = tracker_.ExpireReservations(steady_ns_());
  for (const auto& uid : expired) {
    spdlog::warn("reservation of pod uid {} expired: its bind never completed; ids released", uid);
  }
  if (!expired.empty()) metrics_.SetOutstandingReservations(tracker_.Stats().reserved);
}

void ExtenderService::ReplaceNodes(const std::vector<kube::Node>& nodes) {
  std::vector<std::string> gone;
  {
    std::shared_lock lock(mu_);
    for (const auto& entry : nodes_) {
      const std::string& name = entry.first;
      if (std::none_of(nodes.begin(), nodes.end(),
                       [&](const kube::Node& n) { return n.name == name; })) {
        gone.push_back(name);
      }
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
    std::unique_lock lock(mu_);
    nodes_.erase(node.name);
  }
  tracker_.RemoveNode(node.name);
}

Result<tracker::RecordedPod> ExtenderService::RecordedFromPod(const kube::Pod& pod) const {
  // toposched.io/allocation, else AWS_NEURON_IDS as AWS's extender writes it, so that pods it
  // placed count as used after a switch to toposched.
  auto record = claims::RecordFromPod(pod, options_.resources.Specs());
  if (!record.ok()) return Error{record.error()};
  if (record->node != pod.node_name) {
    return Error{fmt::format("allocation record names node {} but the pod runs on {}", record->node,
                             pod.node_name)};
  }
  int cores_per_device = 0;
  {
    std::shared_lock lock(mu_);
    auto nit = nodes_.find(pod.node_name);
    if (nit == nodes_.end()) return Error{fmt::format("node {} is not known", pod.node_name)};
    cores_per_device = nit->second.cores_per_device;
  }
  if (cores_per_device == 0) {
    return Error{fmt::format("node {} has an unknown instance type", pod.node_name)};
  }
  tracker::RecordedPod recorded{pod.uid, pod.Key(), {pod.node_name, {}}};
  for (const auto& c : record->containers) {
    const bool device =
        std::find(options_.resources.device.begin(), options_.resources.device.end(), c.resource) !=
        options_.resources.device.end();
    const bool core = std::find(options_.resources.core.begin(), options_.resources.core.end(),
                                c.resource) != options_.resources.core.end();
    if (!device && !core) {
      return Error{fmt::format("allocation record names unmanaged resource '{}'", c.resource)};
    }
    topology::Placement p{device ? Unit::kDevice : Unit::kCore, c.ids, 0};
    std::sort(p.ids.begin(), p.ids.end());
    for (int id : p.ids) {
      const int d = device ? id : id / cores_per_device;
      if (id < 0 || d >= topology::kMaxDevices) {
        return Error{fmt::format("allocation record has id {} out of range", id)};
      }
      p.devices |= topology::DeviceMask{1} << d;
    }
    recorded.allocation.containers.push_back({c.container, std::move(p)});
  }
  return recorded;
}

void ExtenderService::ReportProblem(const std::string& uid, const std::string& pod_key,
                                    std::string_view reason, const std::string& message) {
  spdlog::error("pod {}: {}", pod_key, message);
  const auto slash = pod_key.find('/');
  writer_.Event(pod_key.substr(0, slash), pod_key.substr(slash + 1), uid, "Warning", reason,
                message);
}

void ExtenderService::ReplacePods(const std::vector<kube::Pod>& pods) {
  std::vector<std::pair<int64_t, tracker::RecordedPod>> recorded;
  std::unordered_map<std::string, PodRequests> cache;
  std::unordered_map<std::string, std::pair<std::string, std::string>> annotated;
  int invalid = 0;
  for (const auto& pod : pods) {
    if (pod.Terminated()) continue;
    auto requests = RequestsOf(pod, options_.resources);
    if (!requests.ok() || !requests->spec.AsksForAnything()) continue;
    cache[pod.uid] = std::move(requests).value();
    if (pod.node_name.empty()) continue;
    auto rec = RecordedFromPod(pod);
    if (!rec.ok()) {
      if (claims::HasAllocation(pod)) {
        ++invalid;
        ReportProblem(pod.uid, pod.Key(), "AllocationRecordInvalid", rec.error());
      }
      continue;
    }
    int64_t at = 0;
    if (auto t = pod.annotations.find(claims::kAnnotationAllocTime); t != pod.annotations.end()) {
      auto parsed = kube::ParseAllocTime(t->second);
      if (parsed.ok()) at = *parsed;
    }
    if (auto p = pod.annotations.find(kAnnotationPartition); p != pod.annotations.end()) {
      annotated[pod.uid] = {pod.Key(), p->second};
    }
    recorded.emplace_back(at, std::move(rec).value());
  }
  // The earliest allocation keeps contested ids; later claims are reported.
  std::stable_sort(recorded.begin(), recorded.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<tracker::RecordedPod> ordered;
  ordered.reserve(recorded.size());
  for (auto& r : recorded) ordered.push_back(std::move(r.second));
  {
    std::unique_lock lock(mu_);
    pods_ = std::move(cache);
    annotated_ = std::move(annotated);
  }
  const tracker::RebuildReport report = tracker_.Rebuild(ordered, /*keep_reservations=*/true);
  for (const auto& problem : report.problems) {
    ReportProblem(
        problem.uid, problem.name, "AllocationConflict",
        fmt::format("toposched could not restore this pod's devices: {}", problem.message));
  }
  metrics_.CountRebuildConflicts(static_cast<int>(report.problems.size()) + invalid);
  spdlog::info("rebuilt from {} pods: {} allocations restored, {} reservations kept, {} problems",
               pods.size(), report.applied, report.reservations_kept,
               report.problems.size() + invalid);
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
  auto requests = RequestsOf(pod, options_.resources);
  if (!requests.ok() || !requests->spec.AsksForAnything()) return;
  RememberPod(std::move(requests).value());
  if (pod.node_name.empty()) return;
  auto rec = RecordedFromPod(pod);
  if (!rec.ok()) {
    if (claims::HasAllocation(pod)) {
      ReportProblem(pod.uid, pod.Key(), "AllocationRecordInvalid", rec.error());
    }
    return;
  }
  if (auto p = pod.annotations.find(kAnnotationPartition); p != pod.annotations.end()) {
    std::unique_lock lock(mu_);
    annotated_[pod.uid] = {pod.Key(), p->second};
  }
  // Our own bind seen again, or a pod bound by another replica / before a restart: adopt it.
  if (auto s = tracker_.Adopt(*rec); !s.ok()) {
    metrics_.CountRebuildConflicts(1);
    ReportProblem(pod.uid, pod.Key(), "AllocationConflict", s.error());
  }
}

void ExtenderService::DeletePod(const kube::Pod& pod) {
  {
    std::unique_lock lock(mu_);
    pods_.erase(pod.uid);
    annotated_.erase(pod.uid);
  }
  if (options_.provisioner != nullptr) {
    auto hold = tracker_.Find(pod.uid);
    if (hold && !hold->pool.empty()) {
      // Its ids stay held until its partition is gone.
      bool binding = false;
      {
        std::lock_guard lock(prov_mu_);
        (void)tracker_.BeginRelease(pod.uid);
        binding = provisioning_.count(pod.uid) != 0;  // the bind cleans up after itself
      }
      if (!binding) {
        const std::string uid = pod.uid;
        reaper_->Remove(provision::PartitionNameFor(uid), [this, uid] { tracker_.Forget(uid); });
      }
      return;
    }
  }
  tracker_.Forget(pod.uid);
}

}  // namespace toposched::extender
