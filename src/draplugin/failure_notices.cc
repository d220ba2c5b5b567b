#include "draplugin/failure_notices.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/keys.h"
#include "draplugin/resource_claim.h"
#include "kube/objects.h"
#include "topology/id_ranges.h"

namespace toposched::draplugin {
namespace {

std::string Ids(topology::DeviceMask mask) {
  return topology::FormatIdRanges(topology::MaskToIds(mask));
}

// Why the devices failed, as the health check saw it: "neuron2: device-node-missing".
std::string Reasons(topology::DeviceMask failed, const dra::DeviceFaults& faults) {
  std::string out;
  for (int d : topology::MaskToIds(failed)) {
    auto it = faults.find(d);
    if (!out.empty()) out += ", ";
    out += fmt::format("neuron{}: {}", d, it == faults.end() ? "failed" : it->second.reason);
  }
  return out;
}

}  // namespace

std::vector<NoticeDue> NoticesDue(const std::map<std::string, PreparedClaim>& prepared,
                                  topology::DeviceMask unhealthy,
                                  const std::map<std::string, topology::DeviceMask>& told) {
  std::vector<NoticeDue> due;
  for (const auto& [uid, claim] : prepared) {
    const topology::DeviceMask failed = claim.held.devices & unhealthy;
    auto it = told.find(uid);
    const topology::DeviceMask was = it == told.end() ? 0 : it->second;
    if (failed != was) due.push_back(NoticeDue{&claim, failed});
  }
  return due;
}

FailureNotices::FailureNotices(kube::ApiClient& api, std::string node_name, bool evict)
    : api_(api), node_name_(std::move(node_name)), evict_(evict) {}

void FailureNotices::Sync(const std::map<std::string, PreparedClaim>& prepared,
                          const dra::DeviceFaults& faults) {
  std::erase_if(told_, [&](const auto& entry) { return !prepared.contains(entry.first); });
  topology::DeviceMask unhealthy = 0;
  for (const auto& [device, fault] : faults) unhealthy |= topology::DeviceMask{1} << device;
  for (const NoticeDue& notice : NoticesDue(prepared, unhealthy, told_)) {
    if (Status told = Tell(*notice.claim, notice.failed, faults); !told.ok()) {
      spdlog::warn("telling the pods of ResourceClaim {} (retried at the next health check): {}",
                   notice.claim->Who(), told.error());
      continue;
    }
    if (notice.failed != 0) {
      told_[notice.claim->uid] = notice.failed;
    } else {
      told_.erase(notice.claim->uid);
    }
  }
}

Status FailureNotices::Tell(const PreparedClaim& claim, topology::DeviceMask failed,
                            const dra::DeviceFaults& faults) {
  auto view = ReadResourceClaim(api_, claim.ns, claim.name);
  if (!view.ok()) return Error{view.error()};
  if (view->uid != claim.uid) {
    // Another claim of that name: the prepared one is gone; kubelet will unprepare it.
    spdlog::info("ResourceClaim {}/{} now has uid {}, not the prepared {}: no pod to tell",
                 claim.ns, claim.name, view->uid, claim.uid);
    return OkStatus();
  }
  kube::PodCondition condition;
  condition.type = std::string(claims::kConditionDevicesHealthy);
  std::string message;
  if (failed != 0) {
    message = fmt::format(
        "Neuron device(s) {} of node {}, which this pod's ResourceClaim {} holds, are out of "
        "service ({}). {}",
        Ids(failed), node_name_, claim.name, Reasons(failed, faults),
        evict_ ? "Their offers carry a NoExecute device taint: where the cluster serves device "
                 "taints, the pod is evicted unless its claim tolerates it"
               : "The pod keeps its devices until it ends; delete it to place it again on "
                 "healthy ones");
    condition.status = "False";
    condition.reason = std::string(claims::kReasonDeviceFailed);
  } else {
    message = fmt::format(
        "Neuron devices of node {} that this pod's ResourceClaim {} holds are "
        "back in service",
        node_name_, claim.name);
    condition.status = "True";
    condition.reason = std::string(claims::kReasonDevicesInService);
  }
  condition.message = message;
  Status result = OkStatus();
  for (const ClaimConsumer& consumer : view->reserved_for) {
    if (consumer.resource != "pods" || !consumer.api_group.empty()) continue;
    kube::Pod pod;
    pod.ns = claim.ns;
    pod.name = consumer.name;
    pod.uid = consumer.uid;
    if (failed != 0) {
      spdlog::warn("pod {}/{}: {}", pod.ns, pod.name, message);
      if (Status s = kube::PostPodEvent(api_, pod, "Warning", claims::kEventDeviceFailed, message,
                                        "toposched-dra-plugin");
          !s.ok()) {
        result = s;
      }
    } else {
      spdlog::info("pod {}/{}: {}", pod.ns, pod.name, message);
    }
    if (Status s = kube::SetPodCondition(api_, pod, condition); !s.ok()) result = s;
  }
  return result;
}

}  // namespace toposched::draplugin
