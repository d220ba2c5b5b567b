// PodSource over the Kubernetes API: lists the node's pods with fieldSelector spec.nodeName and
// merge-patches annotations.
#ifndef TOPOSCHED_DEVICEPLUGIN_API_POD_SOURCE_H_
#define TOPOSCHED_DEVICEPLUGIN_API_POD_SOURCE_H_

#include <string>

#include "deviceplugin/pod_source.h"
#include "kube/client.h"

namespace toposched::deviceplugin {

class ApiPodSource : public PodSource {
 public:
  // `client` must outlive this object.
  ApiPodSource(kube::ApiClient& client, std::string node_name);

  Result<std::vector<kube::Pod>> PodsOnNode() override;
  Status PatchAnnotations(
      const kube::Pod& pod,
      const std::map<std::string, std::optional<std::string>>& changes) override;

 private:
  kube::ApiClient& client_;
  const std::string node_name_;
};

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_API_POD_SOURCE_H_
