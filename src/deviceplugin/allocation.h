// Which ids a container gets, and what the container is given for them.
//
// The rule: a container gets exactly the ids kubelet chose (kubelet's books, its checkpoint and
// PodResources, then say what the container really holds), and Allocate refuses ids that another
// live pod holds or that another pod's record reserves, instead of handing them out twice.
// GetPreferredAllocation is how the plugin steers kubelet to the pod's recorded ids; when kubelet
// chooses otherwise (or the pod has no record), the container still gets kubelet's ids and the
// plugin writes what it really got (toposched.io/granted, from PodResources) for the extender to
// adopt. The plugin never overrides kubelet's ids: an override is invisible to kubelet, which
// then hands the same ids to the next pod ("device 0 is given to x and z", issue 18).
//
// Which pod is kubelet admitting? Neither GetPreferredAllocation nor Allocate says, so the plugin
// matches the way kubelet admits: kubelet takes the pods bound to it in creation order
// (metadata.creationTimestamp), admits one pod at a time, and allocates its containers in order
// (init containers, then app containers), each resource in turn; it books each Allocate before
// the next. So the container being admitted is, among the live pods on this node, the first in
// (creationTimestamp, namespace, name, container order) whose container asks for exactly this
// many units of this resource and holds none yet. "Holds none yet" is read from kubelet's own
// PodResources when it answers (the truth, with pod names; our served marks may be wrong after a
// misattribution), else from our served marks (annotations and memory). The evidence, strongest
// first:
//   1. the resource and the size: a container asking for 4 devices is never matched by a call
//      for 2, or for cores;
//   2. kubelet knows the pod: pods its PodResources lists (it lists a pod as soon as it admits
//      it) come before pods it has not seen yet, so a pod bound a moment after another but
//      created earlier does not steal the call;
//   3. creation order, which is kubelet's order. creationTimestamp has one-second resolution and
//      kubelet's sort is not stable, so pods created in the same second are truly ambiguous:
//      there, and only there, the ids kubelet asks for break the tie (the pod whose record they
//      are, which GetPreferredAllocation steered kubelet to), then the name.
// NEURON_ALLOC_TIME (when the extender bound the pod) is not kubelet's order and is not used.
// With PodResources answering, a same-second tie is settled by 2 (kubelet adds a pod to its books
// only as it admits it, so the pod it knows that holds nothing yet is the one); the ids are the
// tie-break only without it. A wrong guess cannot give an id twice (the grant is kubelet's ids,
// checked against every holder); it can only attribute the served mark or a gang's env to the
// wrong pod of the tie, and the granted annotation, written from PodResources by pod name,
// corrects the books.
#ifndef TOPOSCHED_DEVICEPLUGIN_ALLOCATION_H_
#define TOPOSCHED_DEVICEPLUGIN_ALLOCATION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "claims/keys.h"
#include "claims/resources.h"
#include "kube/objects.h"
#include "nodeagent/container_setup.h"
#include "nodeagent/device_ids.h"
#include "nodeagent/pod_source.h"
#include "topology/allocator.h"

namespace toposched::deviceplugin {

// Our record of which containers of a pod the plugin has served (claims/keys.h).
using claims::kAnnotationAllocatedContainers;

// The env a gang member's containers get from its toposched.io/gang-record (claims::GangEnv);
// empty without the annotation. A malformed record is an error naming the pod and the annotation.
Result<std::map<std::string, std::string>> GangEnvOfPod(const kube::Pod& pod);

// One container's share of a pod's recorded allocation.
struct Claim {
  std::string container;  // as the record names it
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
Result<PodClaims> ReadPodClaims(const kube::Pod& pod,
                                const std::vector<claims::ResourceSpec>& resources,
                                std::string_view node_name);

// The quantity a container asks for of `spec` (claims/resources.h: limit, else request, summed
// over the resource's name and aliases, as the extender counts it).
using claims::AsksWithAliases;

// A topology-legal choice of `size` units among `available` that includes `must_include`,
// best-fit; if no legal set exists, must_include filled up from the lowest available ids (kubelet
// only takes it as a hint). Pure.
std::vector<int> PreferredByTopology(const topology::NodeShape& shape, topology::Unit unit,
                                     const std::vector<int>& available,
                                     const std::vector<int>& must_include, int size);

struct AllocatorOptions {
  std::string node_name;
  nodeagent::CoreNumbering numbering = nodeagent::CoreNumbering::kContainer;
  std::vector<claims::ResourceSpec> resources;  // every resource this process serves
};

// What Allocate decided for one container.
struct Grant {
  std::vector<int> ids;         // always kubelet's ids
  std::string pod;              // namespace/name of the pod it was matched to; empty when none
  std::string container;        // empty when matched to no pod
  bool by_annotation = false;   // the pod carries a record for this container
  bool matches_record = false;  // ... and kubelet's ids are exactly the recorded ones
  // Env for the container on top of BuildContainerSetup's: a gang member's UltraServer mode,
  // server, node and rank, from its toposched.io/gang-record (claims::GangEnv).
  std::map<std::string, std::string> envs;
};

// The pod look-up behind GetPreferredAllocation and Allocate. Thread-safe: calls are serialised,
// so two containers never take the same claim.
class AllocationService {
 public:
  AllocationService(nodeagent::PodSource& pods, const topology::NodeShape& shape,
                    AllocatorOptions options);

  // GetPreferredAllocation for one container: the ids recorded for the pod kubelet is admitting
  // when they fit `available` and `must_include` and no other pod holds or reserves any of them,
  // else a topology-legal set among the available ids no other pod holds or reserves (else among
  // all available ids: kubelet only takes it as a hint).
  std::vector<int> Prefer(const claims::ResourceSpec& resource, const std::vector<int>& available,
                          const std::vector<int>& must_include, int size);

  // Allocate for one container that kubelet gave `requested`: grants exactly `requested`, or
  // refuses. Refused (with a Warning event on the pod when there is an API writer): ids another
  // live pod holds (kubelet's PodResources or our own grants, across device and core resources),
  // ids another pod's record reserves and that pod has not started, a pod whose record is broken,
  // and a size other than one or all for a pod without a record. A pod carrying a gang record
  // gets its env in the grant; a malformed record fails the allocation (a member must not start
  // with a wrong or missing rank).
  Result<Grant> Allocate(const claims::ResourceSpec& resource, const std::vector<int>& requested);

  // kubelet's PodResources, read by both calls (see the header comment). Null: our own marks
  // only. Must outlive the service.
  void set_kubelet_view(nodeagent::KubeletView* view) {
    MutexLock lock(mutex_);
    kubelet_ = view;
  }

  // Called (outside the lock) after a grant whose ids the pod's annotations do not record (no
  // record, or kubelet chose other ids), so that what the container really got is recorded from
  // PodResources once kubelet has booked it. With the pod's namespace/name; empty when the grant
  // was matched to no pod.
  void set_on_grant_to_record(std::function<void(const std::string& pod)> callback) {
    on_grant_to_record_ = std::move(callback);
  }

  const AllocatorOptions& options() const { return options_; }

 private:
  struct Candidate;
  struct Holder;
  struct View;
  // The pods, kubelet's books and every holder, read once per call.
  Result<View> Read(bool fresh) TS_REQUIRES(mutex_);
  std::vector<Candidate> Candidates(const View& view, const claims::ResourceSpec& resource,
                                    int count, std::vector<std::string>* skipped) const
      TS_REQUIRES(mutex_);
  // The first holder whose physical cores meet `cores`, or null: another pod, or another app
  // container of `pod` (`pod_key`) than `container` (app containers and sidecars run side by
  // side; only an init container, which runs alone before them, shares its units with the pod's
  // others).
  // Without `pod`, the whole of `pod_key` is exempt. Pending records count when `pending` is set.
  const Holder* Conflict(const View& view, const std::set<int>& cores, const std::string& pod_key,
                         bool pending, const kube::Pod* pod = nullptr,
                         std::string_view container = {}) const;
  std::set<int> PhysicalCores(topology::Unit unit, const std::vector<int>& ids) const;
  void ForgetGonePods(const std::vector<kube::Pod>& pods) TS_REQUIRES(mutex_);

  nodeagent::PodSource& pods_;
  const topology::NodeShape shape_;
  const AllocatorOptions options_;
  std::function<void(const std::string& pod)> on_grant_to_record_;

  Mutex mutex_;
  nodeagent::KubeletView* kubelet_ TS_GUARDED_BY(mutex_) = nullptr;
  // What this process granted: pod uid -> "container=resource" -> ids (the annotation may lag
  // or fail, and kubelet's books may not answer).
  struct Served {
    std::string pod;  // namespace/name
    std::string container;
    topology::Unit unit = topology::Unit::kDevice;
    std::vector<int> ids;
  };
  std::map<std::string, std::map<std::string, Served>> served_ TS_GUARDED_BY(mutex_);
  // Pods (uid) whose Allocate this process refused: kubelet failed their admission.
  std::set<std::string> refused_ TS_GUARDED_BY(mutex_);
};

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_ALLOCATION_H_
