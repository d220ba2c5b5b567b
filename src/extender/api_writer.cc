#include "extender/api_writer.h"

#include <spdlog/spdlog.h>

namespace toposched::extender {

Status ApiClusterWriter::Bind(const std::string& ns, const std::string& name,
                              const std::string& uid, const std::string& node,
                              const std::map<std::string, std::string>& annotations) {
  return BindWithOutcome(ns, name, uid, node, annotations).ToStatus();
}

kube::WriteResult ApiClusterWriter::BindWithOutcome(
    const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
    const std::map<std::string, std::string>& annotations) {
  if (may_write_ && !may_write_()) {
    return {kube::WriteOutcome::kNotApplied, 0,
            "not bound: this extender lost the leader lease; the scheduler will retry the pod"};
  }
  return kube::WriteBinding(client_, ns, name, uid, node, annotations, fence_);
}

Result<std::optional<kube::Pod>> ApiClusterWriter::ReadPod(const std::string& ns,
                                                           const std::string& name) {
  return kube::GetPod(client_, ns, name);
}

void ApiClusterWriter::Event(const std::string& ns, const std::string& name, const std::string& uid,
                             std::string_view type, std::string_view reason,
                             std::string_view message) {
  kube::Pod pod;
  pod.ns = ns;
  pod.name = name;
  pod.uid = uid;
  if (auto s = kube::PostPodEvent(client_, pod, type, reason, message, "toposched-extender");
      !s.ok()) {
    spdlog::warn("could not post event on pod {}/{}: {}", ns, name, s.error());
  }
}

}  // namespace toposched::extender
