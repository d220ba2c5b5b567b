// Where the plugin reads the pods bound to its node and writes their annotations, events and its
// node's labels (PodSource), and kubelet's own books of what every container holds (KubeletView,
// PodResources List). The API-backed implementations are in api_pod_source.h and pod_resources.h;
// tests use in-memory ones.
#ifndef TOPOSCHED_NODEAGENT_POD_SOURCE_H_
#define TOPOSCHED_NODEAGENT_POD_SOURCE_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "kube/objects.h"

namespace toposched::nodeagent {

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
  // A Warning event about `pod` (e.g. an Allocate refused). Without an API writer: an error, and
  // the caller's log line is all there is.
  virtual Status PostWarning(const kube::Pod& /*pod*/, std::string_view /*reason*/,
                             std::string_view /*message*/) {
    return Error{"no API writer for events"};
  }
  // Merge-patches one label of this node (nullopt deletes it).
  virtual Status PatchNodeLabel(std::string_view /*key*/,
                                const std::optional<std::string>& /*value*/) {
    return Error{"no API writer for node labels"};
  }
  // Merge-patches annotations of this node (nullopt deletes one).
  virtual Status PatchNodeAnnotations(
      const std::map<std::string, std::optional<std::string>>& /*changes*/) {
    return Error{"no API writer for node annotations"};
  }
  // One label of this node as the API has it now (nullopt: the node has no such label).
  virtual Result<std::optional<std::string>> ReadNodeLabel(std::string_view /*key*/) {
    return Error{"no API reader for node labels"};
  }
};

// One DRA device kubelet prepared for a container (PodResources `dynamic_resources`, reported
// since kubelet 1.34 by default: KubeletPodResourcesDynamicResources, KEP-3695).
struct DraDevice {
  std::string claim;  // namespace/name of the ResourceClaim
  std::string driver;
  std::string pool;
  std::string device;
};

// One container's devices of one resource, as kubelet's PodResources List reports them. A pod
// kubelet knows but that holds no devices yet (e.g. being admitted) is one item with an empty
// container and resource. A container's DRA devices are one more item of that container with an
// empty resource and no device_ids.
struct AssignedDevices {
  std::string ns;
  std::string pod;
  std::string container;
  std::string resource;
  std::vector<std::string> device_ids;
  std::vector<DraDevice> dra_devices{};  // {}: the many brace-built items that hold none
};

// kubelet's books: every pod it runs or is admitting, and the ids it assigned to each container.
// kubelet updates them right after each Allocate returns, before it admits the next container.
class KubeletView {
 public:
  virtual ~KubeletView() = default;
  virtual Result<std::vector<AssignedDevices>> List() = 0;
};

}  // namespace toposched::nodeagent

#endif  // TOPOSCHED_NODEAGENT_POD_SOURCE_H_
