// PodSource over the Kubernetes API: lists the node's pods with fieldSelector spec.nodeName and
// merge-patches annotations.
#ifndef TOPOSCHED_DEVICEPLUGIN_API_POD_SOURCE_H_
#define TOPOSCHED_DEVICEPLUGIN_API_POD_SOURCE_H_

#include <map>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "nodeagent/pod_source.h"

namespace toposched::deviceplugin {

class ApiPodSource : public nodeagent::PodSource {
 public:
  // `client` must outlive this object.
  ApiPodSource(kube::ApiClient& client, std::string node_name);

  Result<std::vector<kube::Pod>> PodsOnNode() override;
  Status PatchAnnotations(
      const kube::Pod& pod,
      const std::map<std::string, std::optional<std::string>>& changes) override;
  Status PostWarning(const kube::Pod& pod, std::string_view reason,
                     std::string_view message) override;
  Status PatchNodeLabel(std::string_view key, const std::optional<std::string>& value) override;
  Status PatchNodeAnnotations(
      const std::map<std::string, std::optional<std::string>>& changes) override;
  Result<std::optional<std::string>> ReadNodeLabel(std::string_view key) override;

 private:
  kube::ApiClient& client_;
  const std::string node_name_;
};

// ApiPodSource behind a watch of the node's pods (fieldSelector spec.nodeName): PodsOnNode reads
// the cache, so GetPreferredAllocation and Allocate do not wait on the API; PodsOnNodeFresh and
// every call before the first list completes go to the API.
class WatchedPodSource : public nodeagent::PodSource {
 public:
  // `client` must outlive this object. Starts the watch.
  WatchedPodSource(kube::ApiClient& client, const std::string& node_name,
                   kube::InformerOptions options = {});
  ~WatchedPodSource() override;

  Result<std::vector<kube::Pod>> PodsOnNode() override;
  Result<std::vector<kube::Pod>> PodsOnNodeFresh() override;
  Status PatchAnnotations(
      const kube::Pod& pod,
      const std::map<std::string, std::optional<std::string>>& changes) override;
  Status PostWarning(const kube::Pod& pod, std::string_view reason,
                     std::string_view message) override {
    return api_.PostWarning(pod, reason, message);
  }
  Status PatchNodeLabel(std::string_view key, const std::optional<std::string>& value) override {
    return api_.PatchNodeLabel(key, value);
  }
  Status PatchNodeAnnotations(
      const std::map<std::string, std::optional<std::string>>& changes) override {
    return api_.PatchNodeAnnotations(changes);
  }
  Result<std::optional<std::string>> ReadNodeLabel(std::string_view key) override {
    return api_.ReadNodeLabel(key);
  }

  bool Synced() const { return informer_->Synced(); }
  bool WaitForSync(std::chrono::milliseconds timeout) { return informer_->WaitForSync(timeout); }

 private:
  ApiPodSource api_;
  Mutex mutex_;
  std::map<std::string, kube::Pod> pods_ TS_GUARDED_BY(mutex_);  // by uid
  std::unique_ptr<kube::PodInformer> informer_;
};

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_API_POD_SOURCE_H_
