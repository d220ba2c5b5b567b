// kubelet's PodResources API (v1 List over its unix socket): which device ids kubelet really
// assigned to each container. The plugin uses it to record the ids on pods that reached the node
// without a toposched allocation (e.g. scheduled by the default scheduler for one device), so the
// extender, which rebuilds its state from pod annotations, sees those devices as used.
#ifndef TOPOSCHED_DEVICEPLUGIN_POD_RESOURCES_H_
#define TOPOSCHED_DEVICEPLUGIN_POD_RESOURCES_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "deviceplugin/device_ids.h"
#include "deviceplugin/pod_source.h"
#include "kube/objects.h"
#include "topology/allocator.h"

namespace toposched::deviceplugin {

struct AssignedDevices {
  std::string ns;
  std::string pod;
  std::string container;
  std::string resource;
  std::vector<std::string> device_ids;
};

class PodResourcesClient {
 public:
  explicit PodResourcesClient(std::string socket_path);
  // Every container's devices, as kubelet's List returns them.
  Result<std::vector<AssignedDevices>> List(std::chrono::milliseconds timeout) const;

 private:
  const std::string socket_path_;
};

struct RecordPatch {
  std::string ns;
  std::string name;
  std::map<std::string, std::optional<std::string>> changes;
};

struct RecordContext {
  std::string node_name;
  std::string instance_type;
  const topology::NodeShape* shape = nullptr;
  std::vector<ResourceSpec> resources;
};

// For every live pod in `pods` that has devices of our resources in `assigned` but no
// toposched.io/allocation annotation: the annotations that record what it really got
// (NEURON_ALLOCATED "true"; AWS_NEURON_IDS and NEURON_ALLOC_TIME only when absent, so an AWS
// extender's own values are kept). Ids kubelet lists that are not ours are skipped with a
// warning in `warnings`.
std::vector<RecordPatch> PlanRecordPatches(const std::vector<kube::Pod>& pods,
                                           const std::vector<AssignedDevices>& assigned,
                                           const RecordContext& context, int64_t now_ns,
                                           std::vector<std::string>* warnings);

// Lists, plans and patches. Returns the number of pods patched; the first failure is logged and
// the rest still tried.
Result<int> RecordKubeletAssignments(const PodResourcesClient& kubelet, PodSource& pods,
                                     const RecordContext& context);

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_POD_RESOURCES_H_
