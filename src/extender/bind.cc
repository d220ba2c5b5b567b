// Bind: reserve the ids the policy chose, make the shared pool's partition if there is one,
// write the Binding with the allocation annotations, commit. Every failure after the first
// check leaves through FailBind, the one place that gives back what the bind held.
#include "extender/bind.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/annotations.h"
#include "claims/keys.h"
#include "extender/service.h"
#include "kube/allocation_record.h"
#include "topology/id_ranges.h"

namespace toposched::extender {

PartitionSteps::PartitionSteps(provision::Provisioner& provisioner, tracker::Tracker& tracker,
                               std::chrono::milliseconds removal_retry)
    : provisioner_(provisioner), tracker_(tracker), reaper_(provisioner, removal_retry) {}

bool PartitionSteps::Begin(const std::string& uid) {
  MutexLock lock(mu_);
  return binding_.insert(uid).second;
}

Status PartitionSteps::Create(const std::string& key, const std::string& pool,
                              const std::string& partition,
                              const tracker::PodAllocation& allocation, PartitionMade* made) {
  provision::Partition want;
  want.name = partition;
  want.pool = pool;
  topology::DeviceMask devices = 0;
  for (const auto& c : allocation.containers) devices |= c.placement.devices;
  want.ipus = topology::MaskToIds(devices);
  bool left_behind = false;
  auto created = provisioner_.CreateAndWait(want, &left_behind);
  if (!created.ok()) {
    *made = left_behind ? PartitionMade::kLeftBehind : PartitionMade::kNone;
    return created;
  }
  *made = PartitionMade::kActive;
  spdlog::info("partition {} for {} is active (pool {}, ipus {})", partition, key, pool,
               fmt::join(want.ipus, ","));
  return OkStatus();
}

Status PartitionSteps::Commit(const std::string& uid) {
  MutexLock lock(mu_);
  Status committed = tracker_.Commit(uid);
  binding_.erase(uid);
  return committed;
}

void PartitionSteps::Abandon(const std::string& uid, bool reserved, const std::string& partition,
                             PartitionMade made) {
  {
    MutexLock lock(mu_);
    binding_.erase(uid);
    if (!reserved) return;
    // Under the lock with the erase: a deletion racing us sees either the bind or the release.
    if (made == PartitionMade::kNone) tracker_.Forget(uid);
    if (made == PartitionMade::kLeftBehind) (void)tracker_.BeginRelease(uid);
  }
  if (made == PartitionMade::kLeftBehind) {
    reaper_.Remove(partition, [this, uid] { tracker_.Forget(uid); });
  } else if (made == PartitionMade::kActive) {
    Release(uid, partition);
  }
}

bool PartitionSteps::PodDeleted(const std::string& uid) {
  auto hold = tracker_.Find(uid);
  if (!hold || hold->pool.empty()) return false;
  bool binding = false;
  {
    MutexLock lock(mu_);
    (void)tracker_.BeginRelease(uid);
    binding = binding_.count(uid) != 0;  // the bind cleans up after itself
  }
  if (!binding) {
    reaper_.Remove(provision::PartitionNameFor(uid), [this, uid] { tracker_.Forget(uid); });
  }
  return true;
}

void PartitionSteps::RemoveOrphan(const provision::Partition& partition) {
  const std::string hold_id = "partition/" + partition.name;
  if (auto s = tracker_.HoldReleasing(hold_id, "partition " + partition.name, partition.pool,
                                      partition.ipus);
      !s.ok()) {
    spdlog::warn("orphan {}", s.error());
  }
  reaper_.Remove(partition.name, [this, hold_id] { tracker_.Forget(hold_id); });
}

void PartitionSteps::Release(const std::string& uid, const std::string& partition) {
  (void)tracker_.BeginRelease(uid);
  if (provisioner_.RemoveAndWait(partition, provisioner_.options().remove_timeout).ok()) {
    tracker_.Forget(uid);
    return;
  }
  reaper_.Remove(partition, [this, uid] { tracker_.Forget(uid); });
}

std::string ExtenderService::FailBind(const BindAttempt& attempt, const std::string& message) {
  if (!attempt.pool.empty()) {
    partitions_->Abandon(attempt.uid, attempt.reserved, attempt.partition, attempt.made);
  } else if (attempt.reserved) {
    if (auto rolled = tracker_.Rollback(attempt.uid); !rolled.ok()) {
      // Expired meanwhile: the ids are free already, which is what a rollback wanted.
      metrics_.CountTrackerError("rollback");
      spdlog::warn("bind {}: rollback after the failure: {}", attempt.key, rolled.error());
    }
  }
  if (attempt.reserved) {
    metrics_.SetOutstandingReservations(tracker_.Stats().reserved);
    spdlog::warn("bind {} to {} failed, what it held is given back: {}", attempt.key, attempt.node,
                 message);
  }
  return EncodeBindingResult(message);
}

std::map<std::string, std::string> ExtenderService::BindingAnnotations(
    const PodRequests& requests, const tracker::PodAllocation& allocation, const std::string& node,
    kube::AllocationRecord* record) const {
  record->node = node;
  {
    ReaderLock lock(mu_);
    if (auto it = nodes_.find(node); it != nodes_.end()) {
      record->instance_type = it->second.instance_type;
    }
  }
  // In kubelet's container order (init containers first), the order AWS_NEURON_IDS is read back
  // in; the tracker placed them largest first.
  for (const auto& want : requests.spec.containers) {
    const auto placed = std::find_if(
        allocation.containers.begin(), allocation.containers.end(), [&](const auto& c) {
          return c.container == want.name && c.placement.unit == want.request.unit;
        });
    if (placed == allocation.containers.end()) continue;
    record->containers.push_back({placed->container,
                                  requests.ResourceFor(placed->container, placed->placement.unit),
                                  placed->placement.ids});
  }
  return claims::AllocationAnnotations(*record, wall_ns_());
}

void ExtenderService::EnsureHeldAsWritten(const Status& committed, const std::string& uid,
                                          const std::string& key,
                                          const tracker::PodAllocation& written) {
  if (committed.ok()) return;
  // Usually the pod watch saw the Binding first and adopted it: held as written, nothing to do.
  const auto hold = tracker_.Find(uid);
  if (hold && hold->state == tracker::HoldState::kCommitted &&
      hold->allocation.node == written.node) {
    return;
  }
  // The reservation was lost during the write. The pod is bound with these ids whatever the
  // tracker says: hold exactly them again, or say loudly that another pod got them meanwhile.
  metrics_.CountTrackerError("commit");
  auto adopted = tracker_.Adopt({uid, key, written});
  spdlog::error("bind {} to {}: the write succeeded but its reservation was gone ({}); {}", key,
                written.node, committed.error(),
                adopted.ok() ? "the recorded ids are held again" : adopted.error());
  if (!adopted.ok()) {
    metrics_.CountRebuildConflicts(1);
    ReportProblem(uid, key, "AllocationConflict", adopted.error());
  }
}

std::string ExtenderService::RunBind(const BindingArgs& args) {
  const std::string key = args.pod_namespace + "/" + args.pod_name;
  if (!Ready()) return EncodeBindingResult(fmt::format("bind {}: {}", key, kNotReadyReason));
  PodRequests requests;
  {
    ReaderLock lock(mu_);
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
  if (!requests.gang_error.empty()) {
    return EncodeBindingResult(fmt::format("pod {}: {}", key, requests.gang_error));
  }
  if (requests.gang) return BindGangMember(args, requests);
  // The reservation outlives the slowest Binding write the client allows, so that expiry never
  // frees ids a write still in flight is about to give the pod.
  const int64_t deadline = steady_ns_() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              options_.reservation_timeout + writer_.MaxWriteTime())
                                              .count();
  // A shared pool's devices exist for the pod only once its partition does. The bind is marked
  // as provisioning before it reserves, so a deletion racing it always leaves cleanup to it.
  BindAttempt attempt;
  attempt.uid = args.pod_uid;
  attempt.key = key;
  attempt.node = args.node;
  attempt.pool = partitions_ ? tracker_.PoolOf(args.node) : std::string();
  if (!attempt.pool.empty() && !partitions_->Begin(args.pod_uid)) {
    return EncodeBindingResult(
        fmt::format("pod {} is already being bound (its partition is being made)", key));
  }
  auto reserved = tracker_.Reserve(requests.spec, args.node, deadline);
  if (!reserved.ok()) {
    spdlog::info("bind {} to {} refused: {}", key, args.node, reserved.error());
    return FailBind(attempt, reserved.error());
  }
  attempt.reserved = true;
  metrics_.SetOutstandingReservations(tracker_.Stats().reserved);

  if (!attempt.pool.empty()) {
    attempt.partition = provision::PartitionNameFor(args.pod_uid);
    // The reservation must outlive the whole provisioning step, however slow the service is.
    const auto budget = partitions_->options().create_timeout +
                        2 * partitions_->options().remove_timeout + options_.reservation_timeout;
    (void)tracker_.ExtendReservation(
        args.pod_uid,
        steady_ns_() + std::chrono::duration_cast<std::chrono::nanoseconds>(budget).count());
    auto created =
        partitions_->Create(key, attempt.pool, attempt.partition, *reserved, &attempt.made);
    if (!created.ok()) {
      metrics_.CountApiError("partition");
      return FailBind(attempt, fmt::format("pod {}: {}; {}", key, created.error(),
                                           attempt.made == PartitionMade::kLeftBehind
                                               ? "its devices stay held until the partition is gone"
                                               : "its devices are released"));
    }
  }

  kube::AllocationRecord record;
  auto annotations = BindingAnnotations(requests, *reserved, args.node, &record);
  if (!attempt.partition.empty()) {
    annotations[std::string(kAnnotationPartition)] = attempt.partition;
  }
  auto status =
      writer_.Bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node, annotations);
  if (!status.ok()) {
    metrics_.CountApiError("bind");
    return FailBind(attempt, status.error());
  }
  if (attempt.pool.empty()) {
    EnsureHeldAsWritten(tracker_.Commit(args.pod_uid), args.pod_uid, key, *reserved);
  } else {
    if (auto committed = partitions_->Commit(args.pod_uid); !committed.ok()) {
      // Deleted while binding: DeletePod left the partition to us.
      return FailBind(attempt, fmt::format("pod {} was deleted while binding; partition {} removed",
                                           key, attempt.partition));
    }
    MutexLock lock(mu_);
    annotated_[args.pod_uid] = {key, attempt.partition};
  }
  metrics_.SetOutstandingReservations(tracker_.Stats().reserved);
  for (const auto& c : record.containers) metrics_.CountAllocation(c.resource);
  {
    MutexLock lock(mu_);
    if (auto it = pods_.find(args.pod_uid); it != pods_.end()) it->second.node_name = args.node;
  }
  spdlog::info("bound {} to {}: {}", key, args.node,
               annotations.at(std::string(claims::kAnnotationNeuronIds)));
  return EncodeBindingResult("");
}

}  // namespace toposched::extender
