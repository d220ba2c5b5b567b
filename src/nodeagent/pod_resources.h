// kubelet's PodResources API (v1 over its unix socket): which device ids kubelet really assigned
// to each container (List, or Get for one pod), and which it holds as allocatable. The plugin uses
// it to record the ids on pods that reached the node without a toposched allocation (e.g. scheduled
// by the default scheduler for one device), so the extender, which rebuilds its state from pod
// annotations, sees those devices as used.
#ifndef TOPOSCHED_NODEAGENT_POD_RESOURCES_H_
#define TOPOSCHED_NODEAGENT_POD_RESOURCES_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "dra/offers.h"
#include "kube/objects.h"
#include "nodeagent/device_ids.h"
#include "nodeagent/pod_source.h"
#include "topology/allocator.h"

namespace toposched::nodeagent {

// kubelet's devices of every resource it holds as allocatable (GetAllocatableResources): resource
// name -> ids. kubelet answers with the ids a plugin advertised healthy in ListAndWatch.
using AllocatableDevices = std::map<std::string, std::set<std::string>>;

// The client of kubelet's PodResources v1. List is in every kubelet; GetAllocatableResources and
// Get are not (kubelet 1.20 answers both UNIMPLEMENTED; Get is behind KubeletPodResourcesGet, off
// before 1.34, GA in 1.36). A call kubelet does not offer answers nullopt, and the client remembers
// that (it is not asked again) until KubeletRestarted(): an upgraded kubelet may offer it.
// Thread-safe.
class PodResourcesClient : public KubeletView {
 public:
  explicit PodResourcesClient(std::string socket_path,
                              std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Every container's devices, as kubelet's List returns them; a pod without any device is one
  // item with an empty container (kubelet knows it: it runs or is being admitted).
  Result<std::vector<AssignedDevices>> List(std::chrono::milliseconds timeout) const;
  Result<std::vector<AssignedDevices>> List() override { return List(timeout_); }
  // One pod's containers and devices, as List would give them for that pod; an empty list when
  // kubelet does not know the pod. nullopt when kubelet does not offer Get.
  Result<std::optional<std::vector<AssignedDevices>>> Get(const std::string& ns,
                                                          const std::string& name,
                                                          std::chrono::milliseconds timeout) const;
  // The devices kubelet holds as allocatable, by resource. nullopt when kubelet does not offer
  // GetAllocatableResources.
  Result<std::optional<AllocatableDevices>> Allocatable(std::chrono::milliseconds timeout) const;
  // kubelet was restarted (maybe upgraded): ask it again what it offers.
  void KubeletRestarted();
  const std::string& socket_path() const { return socket_path_; }

 private:
  const std::string socket_path_;
  const std::chrono::milliseconds timeout_;
  mutable std::atomic<bool> get_refused_{false};
  mutable std::atomic<bool> allocatable_refused_{false};
};

// A DRA device that toposched's DRA driver (dra::kDriverName) handed out in this node's pool,
// prepared for a container that still runs, as the units it takes.
struct DraHold {
  std::string pod;  // namespace/name
  std::string container;
  std::string claim;  // namespace/name
  dra::Offer offer;
};

// The DRA holds among `assigned` (PodResources' dynamic_resources): devices of driver
// neuron.aws.com in the pool `node_name` (the DRA plugin's pool is its node), mapped to units by
// dra::OfferFromName on `shape`. Other drivers and pools are not ours; a name that is no offer
// here is skipped with a warning in `warnings`.
std::vector<DraHold> DraHolds(const std::vector<AssignedDevices>& assigned,
                              const topology::NodeShape& shape, std::string_view node_name,
                              std::vector<std::string>* warnings);

// The value of the node's claims::kLabelDraClaimsHeld while DRA claims hold `devices` (bit d:
// device d): how many Neuron devices; nullopt when none (the label is removed). Both node agents
// write it this way (the DRA plugin through draplugin::ClaimsHeldValue).
std::optional<std::string> DraClaimsHeldValue(topology::DeviceMask devices);

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
// The same for one pod (namespace/name), with Get. nullopt when kubelet does not offer Get: the
// caller does the whole pass with List.
Result<std::optional<int>> RecordKubeletAssignment(const PodResourcesClient& kubelet,
                                                   PodSource& pods, const RecordContext& context,
                                                   const std::string& pod_key);

}  // namespace toposched::nodeagent

#endif  // TOPOSCHED_NODEAGENT_POD_RESOURCES_H_
