// The service's own state and the pieces every part shares. The verbs are in query_verbs.cc
// (filter, prioritize, preempt) and bind.cc; keeping the tracker in step with the cluster is in
// cluster_sync.cc.
#include "extender/service.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace toposched::extender {

ExtenderService::ExtenderService(const topology::Catalog& catalog, ExtenderOptions options,
                                 ClusterWriter& writer, Metrics& metrics, NanoClock steady_ns,
                                 NanoClock wall_ns)
    : catalog_(catalog),
      options_(std::move(options)),
      writer_(writer),
      metrics_(metrics),
      steady_ns_(std::move(steady_ns)),
      wall_ns_(std::move(wall_ns)),
      tracker_(catalog, options_.policy, options_.pools) {
  if (options_.provisioner != nullptr) {
    partitions_ =
        std::make_unique<PartitionSteps>(*options_.provisioner, tracker_, options_.removal_retry);
    partitions_synced_ = false;
  }
}

std::string ExtenderService::Bind(const BindingArgs& args) {
  if (options_.bind_gate) {
    if (Status open = options_.bind_gate(); !open.ok()) {
      spdlog::info("bind {}/{} refused: {}", args.pod_namespace, args.pod_name, open.error());
      metrics_.CountBind("refused");
      return EncodeBindingResult(
          fmt::format("bind {}/{}: {}", args.pod_namespace, args.pod_name, open.error()));
    }
  }
  {
    MutexLock lock(binds_mu_);
    if (binds_stopped_) {
      spdlog::info("bind {}/{} refused: shutting down", args.pod_namespace, args.pod_name);
      metrics_.CountBind("refused");
      return EncodeBindingResult(
          fmt::format("bind {}/{}: {}", args.pod_namespace, args.pod_name, kShuttingDownReason));
    }
    ++binds_in_flight_;
  }
  std::string answer = RunBind(args);
  // One home for the outcome: every way through RunBind ends in its answer.
  metrics_.CountBind(answer == EncodeBindingResult("") ? "bound" : "failed");
  {
    MutexLock lock(binds_mu_);
    --binds_in_flight_;
  }
  binds_done_.NotifyAll();
  return answer;
}

void ExtenderService::StopBinds() {
  MutexLock lock(binds_mu_);
  binds_stopped_ = true;
}

bool ExtenderService::WaitForBinds(std::chrono::milliseconds timeout) {
  MutexLock lock(binds_mu_);
  return binds_done_.WaitFor(binds_mu_, timeout,
                             [this]() TS_REQUIRES(binds_mu_) { return binds_in_flight_ == 0; });
}

void ExtenderService::RememberPod(PodRequests requests) {
  bool first_seen = false;
  tracker::PodSpec spec;
  {
    MutexLock lock(mu_);
    auto [it, inserted] = pods_.try_emplace(requests.spec.uid);
    if (inserted) spec = requests.spec;
    first_seen = inserted;
    if (requests.gang) gang_members_[requests.gang->id].insert(requests.spec.uid);
    if (!inserted) CountWaitingLocked(it->second, -1);
    it->second = std::move(requests);
    CountWaitingLocked(it->second, +1);
  }
  // Each pod counts once into the demand the scarcity policy protects, however often
  // kube-scheduler retries it, and whether the watch or filter shows it first.
  if (first_seen) tracker_.ObserveDemand(spec);
}

void ExtenderService::ForgetPod(const std::string& uid) {
  std::string last_of_gang;
  {
    MutexLock lock(mu_);
    evictions_.erase(uid);
    auto it = pods_.find(uid);
    if (it == pods_.end()) return;
    // Its gang's other members keep what they were told: under evict they are still to go, and
    // otherwise the gang stays broken until its controller restarts it.
    if (it->second.gang_record) {
      auto failing = gang_failures_.find(it->second.gang_record->gang);
      if (failing != gang_failures_.end() && failing->second.erase(uid) != 0 &&
          failing->second.empty()) {
        gang_failures_.erase(failing);
      }
    }
    if (it->second.gang) {
      auto members = gang_members_.find(it->second.gang->id);
      if (members != gang_members_.end()) {
        members->second.erase(uid);
        if (members->second.empty()) {
          last_of_gang = members->first;
          gang_sizes_.erase(members->first);
          gang_members_.erase(members);
        }
      }
    }
    CountWaitingLocked(it->second, -1);
    pods_.erase(it);
  }
  // The job is gone (its last pod deleted): its seats need not wait for --gang-timeout.
  if (!last_of_gang.empty() && tracker_.ReleaseGang(last_of_gang)) {
    metrics_.CountGangOutcome("deleted");
    metrics_.SetGangsHeld(tracker_.Stats().gangs);
    spdlog::info("gang {}: its last pod was deleted; its seats are released", last_of_gang);
  }
}

void ExtenderService::CountWaitingLocked(const PodRequests& pod, int delta) {
  const auto request = WaitingRequestOf(pod);
  if (!request) return;
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->request == *request) {
      it->pods += delta;
      if (it->pods <= 0) waiting_.erase(it);
      return;
    }
  }
  if (delta > 0) waiting_.push_back({*request, delta, false});
}

void ExtenderService::MarkBoundLocked(PodRequests& pod, const std::string& node) {
  CountWaitingLocked(pod, -1);
  pod.node_name = node;
}

std::string ExtenderService::HoldBackReason(const PodRequests& pod) const {
  if (options_.hold_back_age.count() <= 0) return {};
  const auto request = WaitingRequestOf(pod);
  if (!request || !pod.created_unix_s) return {};
  const int64_t age_ns = std::chrono::nanoseconds(options_.hold_back_age).count();
  const int64_t waited_ns = std::max<int64_t>(0, wall_ns_() - *pod.created_unix_s * 1'000'000'000);
  std::vector<topology::WaitingClass> waiting;
  {
    ReaderLock lock(mu_);
    if (waiting_.empty()) return {};
    waiting = waiting_;
  }
  const topology::HoldBack verdict = tracker_.HoldsBack(*request, waited_ns, waiting, age_ns);
  if (!verdict.held) return {};
  constexpr double kNsPerHour = 3600e9;
  return fmt::format(
      "toposched lets smaller pods go first (--hold-back-hours {:g}): {} pods waiting for less "
      "than this pod's {} need {:g} devices, and starting it would leave {:g} free; it is tried "
      "again as they start, and goes in queue order once it has waited {:g} h (it has waited "
      "{:.1f} h)",
      age_ns / kNsPerHour, verdict.smaller_pods, topology::RequestLabel(*request),
      verdict.smaller_devices, std::max(0.0, verdict.free_devices - topology::QueueSize(*request)),
      age_ns / kNsPerHour, waited_ns / kNsPerHour);
}

void ExtenderService::ExpireReservations() {
  // First: a pod whose Binding's outcome is unknown has its hold extended or settled here.
  ResolveUnknownBinds();
  if (retell_failed_devices_ && pods_synced_ &&
      (!options_.may_reconcile || options_.may_reconcile()) &&
      retell_failed_devices_.exchange(false)) {
    TellAllOnFailedDevices();
  }
  if (options_.evict_on_device_failure) RetryEvictions();
  if (partitions_) {
    metrics_.SetPartitionRemovalsPending(static_cast<int>(partitions_->PendingRemovals()));
  }
  const auto expired = tracker_.ExpireReservations(steady_ns_());
  for (const auto& id : expired.gangs) {
    metrics_.CountGangOutcome("expired");
    spdlog::warn(
        "gang {} released whole: not all its members arrived and bound within {} s of the last "
        "one",
        id, std::chrono::duration<double>(options_.gang_timeout).count());
  }
  for (const auto& uid : expired.pods) {
    spdlog::warn("reservation of pod uid {} expired: its bind never completed; ids released", uid);
  }
  // Ids released above (expired, or unknown binds rolled back) may be what a contested record
  // waits for.
  AdoptContested();
  if (!expired.empty()) {
    const tracker::TrackerStats stats = tracker_.Stats();
    metrics_.SetOutstandingReservations(stats.reserved);
    metrics_.SetGangsHeld(stats.gangs);
  }
}

void ExtenderService::ReportProblem(const std::string& uid, const std::string& pod_key,
                                    std::string_view reason, const std::string& message) {
  spdlog::error("pod {}: {}", pod_key, message);
  const auto slash = pod_key.find('/');
  writer_.Event(pod_key.substr(0, slash), pod_key.substr(slash + 1), uid, "Warning", reason,
                message);
}

}  // namespace toposched::extender
