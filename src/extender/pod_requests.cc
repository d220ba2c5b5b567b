#include "extender/pod_requests.h"

#include <utility>

#include <spdlog/spdlog.h>

#include "kube/timestamp.h"

namespace toposched::extender {

std::string PodRequests::ResourceFor(const std::string& container, topology::Unit unit) const {
  for (size_t i = 0; i < spec.containers.size(); ++i) {
    if (spec.containers[i].name == container && spec.containers[i].request.unit == unit) {
      return resource_of[i];
    }
  }
  return {};
}

Result<PodRequests> RequestsOf(const kube::Pod& pod, const ResourceNames& names) {
  PodRequests out;
  out.spec.uid = pod.uid;
  out.spec.name = pod.Key();
  out.ns = pod.ns;
  out.name = pod.name;
  out.node_name = pod.node_name;
  // Only a pod still waiting needs its age (--hold-back-hours): a relist of a big cluster is
  // nearly all bound pods, so they skip the parse.
  if (pod.node_name.empty() && !pod.creation_timestamp.empty()) {
    if (auto created = kube::ParseRfc3339(pod.creation_timestamp); created.ok()) {
      out.created_unix_s = *created;
    } else {
      // Debug: the API server always writes one; a test's hand-made pod need not.
      spdlog::debug("pod {}: creationTimestamp: {}; it is never held back", pod.Key(),
                    created.error());
    }
  }
  TOPOSCHED_ASSIGN_OR_RETURN(auto asks, claims::ListAsks(pod, names.Specs()));
  for (claims::ContainerAsk& ask : asks) {
    out.spec.containers.push_back({ask.container, {ask.unit, ask.count}, ask.init});
    out.resource_of.push_back(std::move(ask.asked_as));
  }
  if (auto gang = claims::GangOf(pod); gang.ok()) {
    out.gang = std::move(gang).value();
  } else {
    out.gang_error = gang.error();
  }
  if (out.gang) {
    out.spec.gang = out.gang->id;
    out.host = claims::PodHostName(pod);
  }
  if (auto record = claims::GangRecordOf(pod); record.ok()) {
    out.gang_record = std::move(record).value();
  } else {
    spdlog::warn("pod {}: {}", pod.Key(), record.error());
  }
  return out;
}

std::optional<topology::Request> WaitingRequestOf(const PodRequests& pod) {
  if (!pod.node_name.empty() || pod.gang || !pod.gang_error.empty() ||
      pod.spec.containers.size() != 1) {
    return std::nullopt;
  }
  return pod.spec.containers.front().request;
}

}  // namespace toposched::extender
