// Which ids a container gets, and what the container is given for them.
//
// Neither GetPreferredAllocation nor Allocate says which pod kubelet is admitting, so the plugin
// finds it the way the annotation handshake works: among the pods bound to this node, the ones
// carrying an allocation (toposched.io/allocation, or AWS's AWS_NEURON_IDS alone) that is not yet
// served, whose container asks for this many units of this resource, oldest NEURON_ALLOC_TIME
// first. GetPreferredAllocation answers with those very ids, so kubelet picks them and its own
// bookkeeping (checkpoint, PodResources) matches what the container really gets; Allocate then
// recognises its container by the exact ids and marks it served.
#ifndef TOPOSCHED_DEVICEPLUGIN_ALLOCATION_H_
#define TOPOSCHED_DEVICEPLUGIN_ALLOCATION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "claims/keys.h"
#include "claims/resources.h"
#include "deviceplugin/device_ids.h"
#include "deviceplugin/pod_source.h"
#include "kube/objects.h"
#include "topology/allocator.h"

namespace toposched::deviceplugin {

// Our record of which containers of a pod the plugin has served (claims/keys.h).
using claims::kAnnotationAllocatedContainers;

// The env a gang member's containers get from its toposched.io/gang-record (claims::GangEnv);
// empty without the annotation. A malformed record is an error naming the pod and the annotation.
Result<std::map<std::string, std::string>> GangEnvOfPod(const kube::Pod& pod);

// One container's share of a pod's recorded allocation.
struct Claim {
  std::string container;
  std::string resource;
  std::vector<int> ids;  // ascending
  int requested = 0;     // what the pod spec asks for this resource (limits, else requests)
  int order = 0;         // kubelet's order: init containers first, then app containers
  bool served = false;   // per the pod's annotations
};

struct PodClaims {
  int64_t alloc_time = 0;    // NEURON_ALLOC_TIME; INT64_MAX when missing
  bool from_record = false;  // toposched.io/allocation; else AWS_NEURON_IDS alone
  std::vector<Claim> claims;
};

// The claims a pod's annotations record for the resources in `resources`. A pod without either
// annotation gives an empty list; malformed annotations are errors naming the annotation.
Result<PodClaims> ReadPodClaims(const kube::Pod& pod, const std::vector<ResourceSpec>& resources,
                                std::string_view node_name);

// The quantity a container asks for of `spec` (claims/resources.h: limit, else request, summed
// over the resource's name and aliases, as the extender counts it).
using claims::ContainerRequest;

// How NEURON_RT_VISIBLE_CORES numbers cores.
enum class CoreNumbering {
  kContainer,  // 0-based over the devices mounted in the container (Neuron K8s >= 2.16.18)
  kHost,       // node-wide ids, as the annotations carry them
};
Result<CoreNumbering> ParseCoreNumbering(std::string_view text);

// What a container gets for `ids`: its /dev/neuronN nodes and environment.
struct ContainerSetup {
  std::vector<std::string> device_nodes;  // "/dev/neuronN", the same path on host and container
  std::map<std::string, std::string> envs;
};
ContainerSetup BuildContainerSetup(const topology::NodeShape& shape, topology::Unit unit,
                                   const std::vector<int>& ids, CoreNumbering numbering);

// "4-7", "3", or "1,3" when not contiguous.
std::string FormatCoreList(const std::vector<int>& cores);

// A topology-legal choice of `size` units among `available` that includes `must_include`,
// best-fit; if no legal set exists, must_include filled up from the lowest available ids (kubelet
// only takes it as a hint). Pure.
std::vector<int> PreferredByTopology(const topology::NodeShape& shape, topology::Unit unit,
                                     const std::vector<int>& available,
                                     const std::vector<int>& must_include, int size);

struct AllocatorOptions {
  std::string node_name;
  CoreNumbering numbering = CoreNumbering::kContainer;
  std::vector<ResourceSpec> resources;  // every resource this process serves
};

// What Allocate decided for one container.
struct Grant {
  std::vector<int> ids;
  std::string pod;        // namespace/name; empty when granted without an annotation
  std::string container;  // empty when granted without an annotation
  bool by_annotation = false;
  // Env for the container on top of BuildContainerSetup's: a gang member's UltraServer mode,
  // server, node and rank, from its toposched.io/gang-record (claims::GangEnv).
  std::map<std::string, std::string> envs;
};

// The pod look-up behind GetPreferredAllocation and Allocate. Thread-safe: calls are serialised,
// so two containers never take the same claim.
class AllocationService {
 public:
  AllocationService(PodSource& pods, const topology::NodeShape& shape, AllocatorOptions options);

  // GetPreferredAllocation for one container: the ids recorded for the pod about to be served
  // when they fit `available` and `must_include`, else a topology-legal set.
  std::vector<int> Prefer(const ResourceSpec& resource, const std::vector<int>& available,
                          const std::vector<int>& must_include, int size);

  // Allocate for one container that kubelet gave `requested`. Errors say what the operator
  // should look at. A pod carrying a gang record gets its env in the grant; a malformed record
  // fails the allocation (a member must not start with a wrong or missing rank).
  Result<Grant> Allocate(const ResourceSpec& resource, const std::vector<int>& requested);

  // Called (outside the lock) after a grant made without any annotation, so that the ids kubelet
  // really assigned can be recorded on the pod once kubelet knows them.
  void set_on_unannotated_grant(std::function<void()> callback) {
    on_unannotated_grant_ = std::move(callback);
  }

  const AllocatorOptions& options() const { return options_; }

 private:
  struct Candidate;
  std::vector<Candidate> Candidates(const std::vector<kube::Pod>& pods,
                                    const ResourceSpec& resource, int count,
                                    std::vector<std::string>* skipped) TS_REQUIRES(mutex_);
  void ForgetGonePods(const std::vector<kube::Pod>& pods) TS_REQUIRES(mutex_);
  bool ServedInMemory(const std::string& uid, const std::string& key) const TS_REQUIRES(mutex_);

  PodSource& pods_;
  const topology::NodeShape shape_;
  const AllocatorOptions options_;
  std::function<void()> on_unannotated_grant_;

  Mutex mutex_;
  // pod uid -> "container=resource" keys served by this process (the annotation may lag or fail).
  std::map<std::string, std::set<std::string>> served_ TS_GUARDED_BY(mutex_);
};

std::string ClaimKey(std::string_view container, std::string_view resource);

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_ALLOCATION_H_
