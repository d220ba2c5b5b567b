// Bind: reserve the ids the policy chose, make the shared pool's partition if there is one,
// write the Binding with the allocation annotations, commit. Every failure after the first
// check leaves through FailBind, the one place that gives back what the bind held.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "claims/keys.h"
#include "extender/partition_steps.h"
#include "extender/service.h"
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

namespace {

// Whether the hold is `written`: the same node and, container by container, the same ids.
bool HeldAsWritten(const tracker::Hold& hold, const tracker::PodAllocation& written) {
  if (hold.allocation.node != written.node ||
      hold.allocation.containers.size() != written.containers.size()) {
    return false;
  }
  for (size_t i = 0; i < written.containers.size(); ++i) {
    const auto& a = hold.allocation.containers[i];
    const auto& b = written.containers[i];
    if (a.container != b.container || a.placement.unit != b.placement.unit ||
        a.placement.ids != b.placement.ids) {
      return false;
    }
  }
  return true;
}

}  // namespace

PoolCommit PartitionSteps::Commit(const std::string& uid, const tracker::PodAllocation& written,
                                  std::string* why) {
  MutexLock lock(mu_);
  Status committed = tracker_.Commit(uid);
  binding_.erase(uid);
  const bool deleted = deleted_.erase(uid) != 0;
  if (committed.ok()) return PoolCommit::kCommitted;
  *why = committed.error();
  // Under mu_, so a deletion cannot slip between this look and the answer.
  if (deleted) return PoolCommit::kDeleted;
  const auto hold = tracker_.Find(uid);
  if (hold && hold->state == tracker::HoldState::kCommitted && HeldAsWritten(*hold, written)) {
    return PoolCommit::kAdoptedByWatch;  // our own Binding, seen by the watch first
  }
  return PoolCommit::kReservationLost;
}

void PartitionSteps::Abandon(const std::string& uid, bool reserved, const std::string& partition,
                             PartitionMade made) {
  {
    MutexLock lock(mu_);
    binding_.erase(uid);
    if (!reserved) return;
    // Under the lock with the erase: a deletion racing us sees either the bind or the release.
    deleted_.erase(uid);
    if (made == PartitionMade::kNone) tracker_.Forget(uid);
    if (made == PartitionMade::kLeftBehind) {
      // Fails only when the pod holds nothing any more (its reservation expired: the bind's
      // deadline covers the provisioning, so only a bind stalled past it). The partition is
      // still removed below; its devices were freed by the expiry, which is logged there.
      if (auto s = tracker_.BeginRelease(uid); !s.ok()) {
        spdlog::error("pod uid {}: partition {} may exist but its devices are no longer held: {}",
                      uid, partition, s.error());
      }
    }
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
    // Fails only when the hold found above was forgotten meanwhile (its removal finished, or its
    // reservation expired): then there is nothing left to release.
    if (auto s = tracker_.BeginRelease(uid); !s.ok()) {
      spdlog::debug("pod uid {} deleted: {}", uid, s.error());
    }
    binding = binding_.count(uid) != 0;  // the bind cleans up after itself
    if (binding) deleted_.insert(uid);
  }
  if (!binding) {
    reaper_.Remove(provision::PartitionNameFor(uid), [this, uid] { tracker_.Forget(uid); });
  }
  return true;
}

bool PartitionSteps::DeletedWhileBinding(const std::string& uid) const {
  MutexLock lock(mu_);
  return deleted_.count(uid) != 0;
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
  // Already releasing (PodDeleted) is the usual failure here, and harmless; a hold that is gone
  // (expired during the bind) leaves nothing to keep.
  if (auto s = tracker_.BeginRelease(uid); !s.ok()) {
    spdlog::warn("pod uid {}: removing partition {}: {}", uid, partition, s.error());
  }
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
    claims::AllocationRecord* record) const {
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
  auto adopted = AdoptHold({uid, key, written});
  spdlog::error("bind {} to {}: the write succeeded but its reservation was gone ({}); {}", key,
                written.node, committed.error(),
                adopted.ok() ? "the recorded ids are held again" : adopted.error());
  if (!adopted.ok()) {
    metrics_.CountRebuildConflicts(1);
    ReportProblem(uid, key, "AllocationConflict", adopted.error());
  }
}

Status ExtenderService::ExtendHold(const std::string& uid, int64_t deadline_ns) {
  // Only the bind thread that owns the reservation (or, after it, the read-back) moves its
  // deadline, so nothing moves it between this look and the move.
  const auto hold = tracker_.Find(uid);
  if (!hold || hold->state != tracker::HoldState::kReserved) {
    return Error{fmt::format("pod uid {} has no reservation to extend", uid)};
  }
  if (hold->deadline_ns >= deadline_ns) return OkStatus();
  return tracker_.ExtendReservation(uid, deadline_ns);
}

namespace {

// Whether the pod carries every annotation the Binding wrote, with the same values: the pod was
// bound by this very write (NEURON_ALLOC_TIME makes the record unique to it).
bool CarriesRecord(const kube::Pod& pod, const std::map<std::string, std::string>& written) {
  for (const auto& [key, value] : written) {
    const auto it = pod.annotations.find(key);
    if (it == pod.annotations.end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

std::string ExtenderService::FinishBind(const UnknownBind& bind) {
  const BindAttempt& attempt = bind.attempt;
  if (attempt.pool.empty()) {
    EnsureHeldAsWritten(tracker_.Commit(attempt.uid), attempt.uid, attempt.key, bind.allocation);
  } else {
    std::string why;
    switch (partitions_->Commit(attempt.uid, bind.allocation, &why)) {
      case PoolCommit::kCommitted:
      case PoolCommit::kAdoptedByWatch:  // the watch saw our Binding first: held as written
        break;
      case PoolCommit::kDeleted: {
        // Deleted while binding: PodDeleted left the partition to us.
        std::string message = fmt::format("pod {} was deleted while binding; partition {} removed",
                                          attempt.key, attempt.partition);
        (void)FailBind(attempt, message);  // the answer is built by the caller from `message`
        return message;
      }
      case PoolCommit::kReservationLost:
        EnsureHeldAsWritten(Status(Error{why}), attempt.uid, attempt.key, bind.allocation);
        break;
    }
    MutexLock lock(mu_);
    annotated_[attempt.uid] = {attempt.key, attempt.partition};
  }
  metrics_.SetOutstandingReservations(tracker_.Stats().reserved);
  for (const auto& resource : bind.resources) metrics_.CountAllocation(resource);
  {
    MutexLock lock(mu_);
    if (auto it = pods_.find(attempt.uid); it != pods_.end())
      MarkBoundLocked(it->second, attempt.node);
  }
  const auto ids = bind.annotations.find(std::string(claims::kAnnotationNeuronIds));
  spdlog::info("bound {} to {}: {}", attempt.key, attempt.node,
               ids != bind.annotations.end() ? ids->second : std::string());
  return "";
}

ExtenderService::Resolution ExtenderService::ResolveUnknownBind(UnknownBind& bind,
                                                                std::string* message) {
  const BindAttempt& attempt = bind.attempt;
  auto read = writer_.ReadPod(bind.ns, bind.name);
  if (!read.ok()) {
    metrics_.CountApiError("bind_read_back");
    *message = fmt::format(
        "pod {}: its Binding to {} may have been applied and the pod cannot be read back ({}); "
        "its ids stay held until it is",
        attempt.key, attempt.node, read.error());
    return Resolution::kUnknown;
  }
  const std::optional<kube::Pod>& pod = *read;
  if (!pod || pod->uid != attempt.uid) {
    *message = fmt::format("pod {} (uid {}) is gone; the ids its bind held are released",
                           attempt.key, attempt.uid);
    if (attempt.pool.empty()) {
      tracker_.Forget(attempt.uid);  // whatever it holds: reserved, or adopted by the watch
      spdlog::warn("bind {} to {}: {}", attempt.key, attempt.node, *message);
    } else {
      (void)FailBind(attempt, *message);  // the partition goes too; the answer is `message`
    }
    return Resolution::kReleased;
  }
  if (pod->node_name.empty()) {
    if (steady_ns_() < bind.settle_ns) {
      *message = fmt::format(
          "pod {}: its Binding to {} got no definite answer and the pod is not bound yet; the "
          "write may still land, so its ids stay held until it is read back again",
          attempt.key, attempt.node);
      return Resolution::kUnknown;
    }
    *message = fmt::format(
        "pod {} is not bound: its Binding to {} was not applied (read back after the write could "
        "no longer land); its ids are released",
        attempt.key, attempt.node);
    (void)FailBind(attempt, *message);  // the answer is `message`
    return Resolution::kReleased;
  }
  if (pod->node_name == attempt.node && CarriesRecord(*pod, bind.annotations)) {
    const std::string failed = FinishBind(bind);
    if (failed.empty()) return Resolution::kCommitted;
    *message = failed;
    return Resolution::kReleased;
  }
  // Bound by another writer (another replica, an earlier leader): the pod runs with what its
  // own record says, not with what this bind reserved.
  *message = fmt::format(
      "pod {} is bound to {} by another write than this bind's (to {}); the ids this bind held "
      "are released and the pod's own record is adopted",
      attempt.key, pod->node_name, attempt.node);
  (void)FailBind(attempt, *message);  // the answer is `message`
  UpsertPod(*pod);                    // adopt what it says, as the pod watch does
  return Resolution::kReleased;
}

size_t ExtenderService::ResolveUnknownBinds() {
  const int64_t now = steady_ns_();
  std::vector<UnknownBind> due;
  {
    MutexLock lock(mu_);
    for (auto& [uid, bind] : unknown_binds_) {
      if (bind.resolving || bind.next_try_ns > now) continue;
      bind.resolving = true;
      due.push_back(bind);
    }
  }
  for (UnknownBind& bind : due) {
    std::string message;
    const Resolution resolution = ResolveUnknownBind(bind, &message);
    metrics_.CountBindReadBack(resolution == Resolution::kCommitted  ? "committed"
                               : resolution == Resolution::kReleased ? "released"
                                                                     : "unknown");
    if (resolution != Resolution::kUnknown) {
      spdlog::info("bind {} to {} read back: {}", bind.attempt.key, bind.attempt.node,
                   resolution == Resolution::kCommitted ? "bound as written; committed" : message);
      MutexLock lock(mu_);
      unknown_binds_.erase(bind.attempt.uid);
      continue;
    }
    spdlog::warn("bind {}: {}", bind.attempt.key, message);
    ++bind.tries;
    const auto wait = options_.read_back_retry * (1 << std::min(bind.tries, 4));
    bind.next_try_ns = now + std::chrono::nanoseconds(wait).count();
    bind.resolving = false;
    // Held until the next read-back and past it: a failing GET never frees the ids. A hold the
    // watch committed meanwhile has no deadline to move (the error is then expected).
    if (auto s = ExtendHold(
            bind.attempt.uid,
            bind.next_try_ns + std::chrono::nanoseconds(options_.reservation_timeout).count());
        !s.ok()) {
      spdlog::debug("bind {}: {}", bind.attempt.key, s.error());
    }
    MutexLock lock(mu_);
    unknown_binds_[bind.attempt.uid] = std::move(bind);
  }
  MutexLock lock(mu_);
  return unknown_binds_.size();
}

std::string ExtenderService::WriteBinding(const BindingArgs& args, UnknownBind bind) {
  const kube::WriteResult written = writer_.BindWithOutcome(
      args.pod_namespace, args.pod_name, args.pod_uid, args.node, bind.annotations);
  if (written.ok()) return EncodeBindingResult(FinishBind(bind));
  if (!written.unknown() && !written.conflict()) {
    metrics_.CountApiError("bind");
    return FailBind(bind.attempt, written.error);
  }
  // Unknown (a timeout, a 5xx) or 409 (the pod is bound already, or re-created): the truth is
  // the pod. It is read back once here, so that kube-scheduler gets the real answer when the API
  // server can give it; what stays unknown is read back in the background (ResolveUnknownBinds,
  // from the housekeeping tick) while the ids stay held, and kube-scheduler is told to retry.
  // Waiting here instead would hold kube-scheduler's bind call (its httpTimeout) for as long as
  // the API server stays unsure, and a retried bind of the same pod is answered from the hold.
  metrics_.CountApiError(written.unknown() ? "bind_unknown" : "bind_conflict");
  spdlog::warn("bind {} to {}: {}; reading the pod back", bind.attempt.key, args.node,
               written.error);
  // A 409 answers this write definitely (it was not applied); an unknown one may still land.
  bind.settle_ns = SteadyNsAfter(written.unknown() ? options_.unknown_write_settle
                                                   : std::chrono::milliseconds(0));
  std::string message;
  const Resolution resolution = ResolveUnknownBind(bind, &message);
  metrics_.CountBindReadBack(resolution == Resolution::kCommitted  ? "committed"
                             : resolution == Resolution::kReleased ? "released"
                                                                   : "unknown");
  if (resolution == Resolution::kCommitted) return EncodeBindingResult("");
  if (resolution == Resolution::kReleased) return EncodeBindingResult(message);
  bind.next_try_ns = SteadyNsAfter(options_.read_back_retry);
  if (auto s = ExtendHold(bind.attempt.uid,
                          std::max(bind.settle_ns, bind.next_try_ns) +
                              std::chrono::nanoseconds(options_.reservation_timeout).count());
      !s.ok()) {
    // The watch committed the hold meanwhile (the pod is bound as written): nothing to extend.
    spdlog::debug("bind {}: {}", bind.attempt.key, s.error());
  }
  {
    MutexLock lock(mu_);
    const std::string uid = bind.attempt.uid;
    unknown_binds_[uid] = std::move(bind);
  }
  return EncodeBindingResult(fmt::format("{}; {}", written.error, message));
}

std::optional<std::string> ExtenderService::MakePartition(BindAttempt& attempt,
                                                          const tracker::PodAllocation& reserved) {
  attempt.partition = provision::PartitionNameFor(attempt.uid);
  // The reservation must outlive the whole provisioning step and then the write, however slow
  // each is; it is only ever moved later (issue 18: the write's time was once dropped here).
  const auto budget = partitions_->options().create_timeout +
                      2 * partitions_->options().remove_timeout + options_.reservation_timeout +
                      writer_.MaxWriteTime();
  if (auto extended = ExtendHold(attempt.uid, SteadyNsAfter(budget)); !extended.ok()) {
    // Just reserved by this thread: no longer a reservation only if the pod was deleted
    // meanwhile (PodDeleted began its release) or it expired already (a stalled thread).
    if (partitions_->DeletedWhileBinding(attempt.uid)) {
      return FailBind(attempt, fmt::format("pod {} was deleted while binding; no partition was "
                                           "made, its ids are released",
                                           attempt.key));
    }
    metrics_.CountTrackerError("extend");
    return FailBind(attempt, fmt::format("pod {}: its reservation ran out before its partition "
                                         "was made ({}); it will be retried",
                                         attempt.key, extended.error()));
  }
  auto created =
      partitions_->Create(attempt.key, attempt.pool, attempt.partition, reserved, &attempt.made);
  if (!created.ok()) {
    metrics_.CountApiError("partition");
    return FailBind(attempt, fmt::format("pod {}: {}; {}", attempt.key, created.error(),
                                         attempt.made == PartitionMade::kLeftBehind
                                             ? "its devices stay held until the partition is gone"
                                             : "its devices are released"));
  }
  return std::nullopt;
}

Result<PodRequests> ExtenderService::BindRequests(const BindingArgs& args, const std::string& key) {
  if (!Ready()) return Error{fmt::format("bind {}: {}", key, kNotReadyReason)};
  PodRequests requests;
  {
    ReaderLock lock(mu_);
    if (unknown_binds_.count(args.pod_uid) != 0) {
      return Error{fmt::format(
          "pod {}: the outcome of its last Binding is not yet known; its ids stay held until the "
          "pod is read back; it will be retried",
          key)};
    }
    auto it = pods_.find(args.pod_uid);
    if (it == pods_.end()) {
      return Error{fmt::format(
          "pod {} (uid {}) is not known to toposched: it was neither seen by the pod watch nor "
          "passed through filter; it will be retried",
          key, args.pod_uid)};
    }
    requests = it->second;
  }
  requests = WithGangSize(std::move(requests), /*may_ask=*/false);
  if (!requests.node_name.empty()) {
    return Error{fmt::format("pod {} is already bound to node {}", key, requests.node_name)};
  }
  return requests;
}

std::string ExtenderService::RunBind(const BindingArgs& args) {
  const std::string key = args.pod_namespace + "/" + args.pod_name;
  Result<PodRequests> found = BindRequests(args, key);
  if (!found.ok()) return EncodeBindingResult(found.error());
  const PodRequests requests = std::move(found).value();
  if (!requests.spec.AsksForAnything()) {
    // Managed pods with zero counts: bind without ids, so an unknown outcome holds nothing.
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
  const int64_t deadline = BindReservationDeadline();
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
    if (auto failed = MakePartition(attempt, *reserved)) return *failed;
  }

  claims::AllocationRecord record;
  UnknownBind bind;
  bind.annotations = BindingAnnotations(requests, *reserved, args.node, &record);
  if (!attempt.partition.empty()) {
    bind.annotations[std::string(kAnnotationPartition)] = attempt.partition;
  }
  bind.attempt = attempt;
  bind.ns = args.pod_namespace;
  bind.name = args.pod_name;
  bind.allocation = *reserved;
  bind.allocation.node = args.node;
  for (const auto& c : record.containers) bind.resources.push_back(c.resource);
  return WriteBinding(args, std::move(bind));
}

}  // namespace toposched::extender
