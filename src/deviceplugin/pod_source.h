// Where the plugin reads the pods bound to its node and writes their annotations. The API-backed
// implementation is in api_pod_source.h; tests use an in-memory one.
#ifndef TOPOSCHED_DEVICEPLUGIN_POD_SOURCE_H_
#define TOPOSCHED_DEVICEPLUGIN_POD_SOURCE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "kube/objects.h"

namespace toposched::deviceplugin {

class PodSource {
 public:
  virtual ~PodSource() = default;
  // Every pod bound to this node, in any phase. May come from a cache that trails the API by
  // a watch event.
  virtual Result<std::vector<kube::Pod>> PodsOnNode() = 0;
  // The same, read from the API now: for when the cache lacks a pod kubelet is already
  // admitting (kubelet and our watch learn of a binding at about the same time).
  virtual Result<std::vector<kube::Pod>> PodsOnNodeFresh() { return PodsOnNode(); }
  // Merge-patches the pod's annotations: a value sets the key, nullopt deletes it.
  virtual Status PatchAnnotations(
      const kube::Pod& pod, const std::map<std::string, std::optional<std::string>>& changes) = 0;
};

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_POD_SOURCE_H_
