#include "deviceplugin/api_pod_source.h"

#include <fmt/format.h>

#include "kube/decode.h"
#include "kube/informer.h"
#include "kube/list.h"

namespace toposched::deviceplugin {
namespace {

// A node holds at most a few hundred pods; pages keep one answer small all the same.
constexpr int kPageSize = 500;

}  // namespace

ApiPodSource::ApiPodSource(kube::ApiClient& client, std::string node_name)
    : client_(client), node_name_(std::move(node_name)) {}

Result<std::vector<kube::Pod>> ApiPodSource::PodsOnNode() {
  auto pods = kube::ListPods(
      client_, kube::kPodsPath,
      "fieldSelector=" + kube::EscapeUrlComponent("spec.nodeName=" + node_name_), kPageSize);
  if (!pods.ok()) return Error{fmt::format("pods on node {}: {}", node_name_, pods.error())};
  return pods;
}

Status ApiPodSource::PatchAnnotations(
    const kube::Pod& pod, const std::map<std::string, std::optional<std::string>>& changes) {
  return kube::PatchPodAnnotations(client_, pod.ns, pod.name, changes);
}

Status ApiPodSource::PostWarning(const kube::Pod& pod, std::string_view reason,
                                 std::string_view message) {
  return kube::PostPodEvent(client_, pod, "Warning", reason, message, "toposched-device-plugin");
}

Status ApiPodSource::PatchNodeLabel(std::string_view key, const std::optional<std::string>& value) {
  return kube::PatchNodeLabel(client_, node_name_, key, value);
}

Status ApiPodSource::PatchNodeAnnotations(
    const std::map<std::string, std::optional<std::string>>& changes) {
  return kube::PatchNodeAnnotations(client_, node_name_, changes);
}

Result<std::optional<std::string>> ApiPodSource::ReadNodeLabel(std::string_view key) {
  const std::string what = fmt::format("reading node {}", node_name_);
  auto response = client_.Get("/api/v1/nodes/" + kube::EscapeUrlComponent(node_name_));
  if (!response.ok()) return Error{fmt::format("{}: {}", what, response.error())};
  if (response->status < 200 || response->status > 299) {
    return Error{fmt::format("{}: HTTP {}: {}", what, response->status,
                             kube::StatusMessage(response->body))};
  }
  auto node = kube::DecodeNode(response->body);
  if (!node.ok()) return Error{fmt::format("{}: {}", what, node.error())};
  auto label = node->labels.find(key);
  if (label == node->labels.end()) return std::optional<std::string>();
  return std::optional<std::string>(label->second);
}

WatchedPodSource::WatchedPodSource(kube::ApiClient& client, const std::string& node_name,
                                   kube::InformerOptions options)
    : api_(client, node_name) {
  options.field_selector = "spec.nodeName=" + node_name;
  kube::InformerHandlers<kube::Pod> handlers;
  handlers.on_replace = [this](const std::vector<kube::Pod>& all) {
    MutexLock lock(mutex_);
    pods_.clear();
    for (const kube::Pod& pod : all) pods_.emplace(pod.uid, pod);
  };
  handlers.on_upsert = [this](const kube::Pod& pod) {
    MutexLock lock(mutex_);
    pods_.insert_or_assign(pod.uid, pod);
  };
  handlers.on_delete = [this](const kube::Pod& pod) {
    MutexLock lock(mutex_);
    pods_.erase(pod.uid);
  };
  informer_ = std::make_unique<kube::PodInformer>(client, kube::kPodsPath, std::move(handlers),
                                                  std::move(options));
  informer_->Start();
}

WatchedPodSource::~WatchedPodSource() { informer_->Stop(); }

Result<std::vector<kube::Pod>> WatchedPodSource::PodsOnNode() {
  if (!informer_->Synced()) return api_.PodsOnNode();
  std::vector<kube::Pod> out;
  MutexLock lock(mutex_);
  out.reserve(pods_.size());
  for (const auto& [uid, pod] : pods_) out.push_back(pod);
  return out;
}

Result<std::vector<kube::Pod>> WatchedPodSource::PodsOnNodeFresh() { return api_.PodsOnNode(); }

Status WatchedPodSource::PatchAnnotations(
    const kube::Pod& pod, const std::map<std::string, std::optional<std::string>>& changes) {
  return api_.PatchAnnotations(pod, changes);
}

}  // namespace toposched::deviceplugin
