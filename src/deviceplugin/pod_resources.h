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

class PodResourcesClient : public KubeletView {
 public:
  explicit PodResourcesClient(std::string socket_path,
                              std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Every container's devices, as kubelet's List returns them; a pod without any device is one
  // item with an empty container (kubelet knows it: it runs or is being admitted).
  Result<std::vector<AssignedDevices>> List(std::chrono::milliseconds timeout) const;
  Result<std::vector<AssignedDevices>> List() override { return List(timeout_); }

 private:
  const std::string socket_path_;
  const std::chrono::milliseconds timeout_;
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
// extender's own values are kept). For every pod with a record whose containers kubelet booked
// other ids than it says: toposched.io/granted, the record with kubelet's ids (the extender
// adopts it through claims::RecordFromPod). Ids kubelet lists that are not ours are skipped with
// a warning in `warnings`.
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
