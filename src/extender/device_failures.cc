// What the extender does when a node's agent reports devices out of service (or back): the
// tracker already refuses them (NodeInfo::out_of_service); here the pods holding ids on them are
// told, and evicted when the operator asked for it (--on-device-failure=evict).
#include <algorithm>
#include <iterator>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/keys.h"
#include "extender/fleet_state.h"
#include "extender/service.h"
#include "topology/id_ranges.h"

namespace toposched::extender {

namespace {

std::string Ids(topology::DeviceMask mask) {
  return topology::FormatIdRanges(topology::MaskToIds(mask));
}

// The devices a hold's ids touch.
topology::DeviceMask DevicesOf(const tracker::HolderView& holder,
                               const topology::NodeShape& shape) {
  topology::DeviceMask touched = 0;
  for (const auto& c : holder.containers) {
    ForEachDeviceOf(shape, c.placement, [&](int d) { touched |= topology::DeviceMask{1} << d; });
  }
  return touched;
}

}  // namespace

void ExtenderService::TellPodsOnChangedDevices(const std::string& node, topology::DeviceMask failed,
                                               topology::DeviceMask recovered,
                                               const std::string& why) {
  if (failed != 0) {
    spdlog::warn("node {}: device(s) {} out of service ({}); no new set will contain them", node,
                 Ids(failed), why.empty() ? "no reason given" : why);
  }
  if (recovered != 0) spdlog::info("node {}: device(s) {} back in service", node, Ids(recovered));
  const std::vector<tracker::NodeView> views = tracker_.NodeViews(std::span(&node, 1));
  if (views.empty() || !views.front().shape) return;
  for (const tracker::HolderView& holder : views.front().holders) {
    TellHolder(views.front(), holder, failed, recovered, why);
  }
  if (options_.evict_on_device_failure && failed != 0) RetryEvictions();
}

bool ExtenderService::TellHolder(const tracker::NodeView& view, const tracker::HolderView& holder,
                                 topology::DeviceMask failed, topology::DeviceMask recovered,
                                 const std::string& why) {
  // A gang's seat has no pod yet; its member will be placed by the gang's new choice.
  if (holder.gang_seat || !view.shape) return false;
  const std::string& node = view.info.name;
  const topology::DeviceMask touched = DevicesOf(holder, *view.shape);
  const auto slash = holder.pod_name.find('/');
  if (slash == std::string::npos) return false;
  const std::string ns = holder.pod_name.substr(0, slash);
  const std::string name = holder.pod_name.substr(slash + 1);
  // One writer tells them: a standby sees the same and would write duplicates.
  const bool write = !options_.may_reconcile || options_.may_reconcile();
  kube::PodCondition condition;
  condition.type = std::string(claims::kConditionDevicesHealthy);
  if ((touched & failed) != 0) {
    const std::string what =
        fmt::format("Neuron device(s) {} of node {} ({})", Ids(touched & failed), node,
                    why.empty() ? "reported by the node's device plugin" : why);
    const bool in_gang = !BoundGangOf(holder.uid).empty();
    std::string next = options_.evict_on_device_failure
                           ? "The pod is being evicted (PodDisruptionBudgets are honoured)"
                           : "The pod keeps its devices until it ends; delete it to place it "
                             "again on healthy ones";
    if (in_gang) {
      next += options_.evict_on_device_failure ? "; so is every other member of its gang"
                                               : "; its gang's other members are told";
    }
    const std::string message =
        fmt::format("{}, which this pod holds, are out of service. {}", what, next);
    spdlog::warn("pod {}: {}", holder.pod_name, message);
    if (!write) return false;
    writer_.Event(ns, name, holder.uid, "Warning", std::string(claims::kEventDeviceFailed),
                  message);
    condition.status = "False";
    condition.reason = std::string(claims::kReasonDeviceFailed);
    condition.message = message;
    if (Status s = writer_.SetCondition(ns, name, holder.uid, condition); !s.ok()) {
      spdlog::warn("pod {}: {}", holder.pod_name, s.error());
    }
    if (options_.evict_on_device_failure) {
      MutexLock lock(mu_);
      evictions_[holder.uid] = PendingEviction{holder.pod_name, 0};
    }
    if (in_gang) TellGangOfFailedMember(holder.uid, holder.pod_name, what);
    return true;
  }
  if ((touched & recovered) != 0 && (touched & view.usage.out_of_service()) == 0) {
    if (!write) return false;
    condition.status = "True";
    condition.reason = std::string(claims::kReasonDevicesInService);
    condition.message = fmt::format("Neuron device(s) {} of node {} are back in service",
                                    Ids(touched & recovered), node);
    if (Status s = writer_.SetCondition(ns, name, holder.uid, condition); !s.ok()) {
      spdlog::warn("pod {}: {}", holder.pod_name, s.error());
    }
    {
      MutexLock lock(mu_);
      if (evictions_.erase(holder.uid) != 0) {
        spdlog::info("pod {}: its devices are back in service; not evicting it", holder.pod_name);
      }
    }
    TellGangOfRecoveredMember(holder.uid);
  }
  return false;
}

std::string ExtenderService::BoundGangOf(const std::string& uid) const {
  ReaderLock lock(mu_);
  return BoundGangOfLocked(uid);
}

std::string ExtenderService::BoundGangOfLocked(const std::string& uid) const {
  auto it = pods_.find(uid);
  return it != pods_.end() && it->second.gang_record ? it->second.gang_record->gang : std::string();
}

std::vector<std::pair<std::string, std::string>> ExtenderService::OtherBoundMembersLocked(
    const std::string& gang, const std::string& uid) const {
  std::vector<std::pair<std::string, std::string>> others;  // uid, namespace/name
  auto members = gang_members_.find(gang);
  if (members == gang_members_.end()) return others;
  for (const std::string& member : members->second) {
    if (member == uid) continue;
    auto pod = pods_.find(member);
    // A member not bound yet holds nothing and runs nothing: the gang's next placement seats it.
    if (pod == pods_.end() || pod->second.node_name.empty() || !pod->second.gang_record ||
        pod->second.gang_record->gang != gang) {
      continue;
    }
    others.emplace_back(member, pod->second.ns + "/" + pod->second.name);
  }
  std::sort(others.begin(), others.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  return others;
}

void ExtenderService::TellGangOfFailedMember(const std::string& uid, const std::string& pod_name,
                                             const std::string& what) {
  std::string gang;
  std::vector<std::pair<std::string, std::string>> others;
  {
    MutexLock lock(mu_);
    gang = BoundGangOfLocked(uid);
    if (gang.empty()) return;
    std::unordered_set<std::string>& failing = gang_failures_[gang];
    const bool first = failing.empty();
    failing.insert(uid);
    if (!first) return;  // the others heard of the gang's first failed member
    others = OtherBoundMembersLocked(gang, uid);
    if (options_.evict_on_device_failure) {
      for (const auto& [member, name] : others) evictions_[member] = PendingEviction{name, 0};
    }
  }
  const std::string message = fmt::format(
      "Member {} of gang {} holds {}, which are out of service; the gang's collective needs "
      "every member. {}",
      pod_name, gang, what,
      options_.evict_on_device_failure
          ? "Every member of the gang is being evicted, so that its controller places the gang "
            "again whole on healthy devices (PodDisruptionBudgets are honoured)"
          : "Its members keep their devices; restart the gang (delete its pods) to place it "
            "again whole on healthy ones");
  spdlog::warn("gang {}: {} other bound member(s) told: {}", gang, others.size(), message);
  kube::PodCondition condition;
  condition.type = std::string(claims::kConditionDevicesHealthy);
  condition.status = "False";
  condition.reason = std::string(claims::kReasonGangMemberDeviceFailed);
  condition.message = message;
  for (const auto& [member, name] : others) {
    const auto slash = name.find('/');
    const std::string ns = name.substr(0, slash);
    const std::string pod = name.substr(slash + 1);
    writer_.Event(ns, pod, member, "Warning", std::string(claims::kEventGangMemberDeviceFailed),
                  message);
    if (Status s = writer_.SetCondition(ns, pod, member, condition); !s.ok()) {
      spdlog::warn("pod {}: {}", name, s.error());
    }
  }
}

void ExtenderService::TellGangOfRecoveredMember(const std::string& uid) {
  std::string gang;
  std::vector<std::pair<std::string, std::string>> others;
  {
    MutexLock lock(mu_);
    gang = BoundGangOfLocked(uid);
    if (gang.empty()) return;
    auto failing = gang_failures_.find(gang);
    if (failing == gang_failures_.end() || failing->second.erase(uid) == 0) return;
    if (!failing->second.empty()) return;  // another member is still on a failed device
    gang_failures_.erase(failing);
    others = OtherBoundMembersLocked(gang, uid);
    for (const auto& entry : others) evictions_.erase(entry.first);
  }
  kube::PodCondition condition;
  condition.type = std::string(claims::kConditionDevicesHealthy);
  condition.status = "True";
  condition.reason = std::string(claims::kReasonDevicesInService);
  condition.message =
      fmt::format("No member of gang {} holds a failed Neuron device any more", gang);
  spdlog::info("gang {}: no member holds a failed device any more; not evicting the others", gang);
  for (const auto& [member, name] : others) {
    const auto slash = name.find('/');
    if (Status s =
            writer_.SetCondition(name.substr(0, slash), name.substr(slash + 1), member, condition);
        !s.ok()) {
      spdlog::warn("pod {}: {}", name, s.error());
    }
  }
}

ExtenderService::FirstHolds ExtenderService::FirstHoldsOnFailedDevices(
    std::span<const tracker::RecordedPod> pods) const {
  FirstHolds first;
  {
    ReaderLock lock(mu_);
    // A list longer than the fleet (a first list of a million pods) looks for failing nodes
    // first: usually there are none, and one pass over the nodes replaces a lookup per pod.
    if (pods.size() > nodes_.size() &&
        std::none_of(nodes_.begin(), nodes_.end(),
                     [](const auto& entry) { return entry.second.out_of_service != 0; })) {
      return first;
    }
    for (const tracker::RecordedPod& pod : pods) {
      // Not a lambda: the thread-safety analysis cannot see the lock held around one.
      auto it = nodes_.find(pod.allocation.node);
      if (it != nodes_.end() && it->second.out_of_service != 0) {
        first[pod.allocation.node].insert(pod.uid);
      }
    }
  }
  // A pod the tracker holds ids for already was told with its node (or adopted before).
  for (auto node = first.begin(); node != first.end();) {
    std::erase_if(node->second,
                  [&](const std::string& uid) { return tracker_.Find(uid).has_value(); });
    node = node->second.empty() ? first.erase(node) : std::next(node);
  }
  return first;
}

void ExtenderService::TellFirstHolds(const FirstHolds& first) {
  bool evict = false;
  for (const auto& [node, uids] : first) {
    // On a node the tracker does not know yet the holds are parked: they are told with the node
    // (TellPodsOnChangedDevices, when it takes them back).
    const std::vector<tracker::NodeView> views = tracker_.NodeViews(std::span(&node, 1));
    if (views.empty() || views.front().info.out_of_service == 0) continue;
    std::string why;
    {
      ReaderLock lock(mu_);
      if (auto it = nodes_.find(node); it != nodes_.end()) why = it->second.out_of_service_why;
    }
    for (const tracker::HolderView& holder : views.front().holders) {
      if (uids.count(holder.uid) == 0) continue;
      if (TellHolder(views.front(), holder, views.front().info.out_of_service, 0, why))
        evict = true;
    }
  }
  if (options_.evict_on_device_failure && evict) RetryEvictions();
}

Status ExtenderService::AdoptHold(const tracker::RecordedPod& pod) {
  const FirstHolds first = FirstHoldsOnFailedDevices(std::span(&pod, 1));
  Status adopted = tracker_.Adopt(pod);
  if (adopted.ok()) TellFirstHolds(first);
  return adopted;
}

void ExtenderService::TellAllOnFailedDevices() {
  std::vector<std::tuple<std::string, topology::DeviceMask, std::string>> failed;
  {
    MutexLock lock(mu_);
    gang_failures_.clear();  // every gang is told afresh too
    for (const auto& [name, facts] : nodes_) {
      if (facts.out_of_service != 0) {
        failed.emplace_back(name, facts.out_of_service, facts.out_of_service_why);
      }
    }
  }
  for (const auto& [node, devices, why] : failed) {
    TellPodsOnChangedDevices(node, devices, 0, why);
  }
}

void ExtenderService::RetryEvictions() {
  std::vector<std::pair<std::string, std::string>> due;  // uid, pod
  const int64_t now = steady_ns_();
  {
    ReaderLock lock(mu_);
    for (const auto& [uid, pending] : evictions_) {
      if (pending.next_ns <= now) due.emplace_back(uid, pending.pod);
    }
  }
  for (const auto& [uid, pod] : due) {
    const auto slash = pod.find('/');
    const Status evicted = writer_.Evict(pod.substr(0, slash), pod.substr(slash + 1), uid);
    MutexLock lock(mu_);
    auto it = evictions_.find(uid);
    if (it == evictions_.end()) continue;  // its devices came back meanwhile
    if (evicted.ok()) {
      spdlog::warn("pod {}: evicted off its failed Neuron device(s)", pod);
      evictions_.erase(it);
    } else {
      spdlog::warn("pod {}: not evicted yet ({}); trying again in {} s", pod, evicted.error(),
                   std::chrono::duration<double>(options_.eviction_retry).count());
      it->second.next_ns =
          now +
          std::chrono::duration_cast<std::chrono::nanoseconds>(options_.eviction_retry).count();
    }
  }
}

}  // namespace toposched::extender
