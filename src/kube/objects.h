// Typed views of the Kubernetes objects toposched reads: only the fields it uses. Decoders
// (kube/decode.h) fill them from API JSON; nothing here does I/O.
#ifndef TOPOSCHED_KUBE_OBJECTS_H_
#define TOPOSCHED_KUBE_OBJECTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace toposched::kube {

// The prefix of toposched's own labels and annotations. Re-exported as claims::kKeyPrefix with
// every other key (claims/keys.h); defined here because kube, below claims, keeps only the node
// labels we read (kube::IsNodeLabelWeRead).
inline constexpr std::string_view kOwnKeyPrefix = "toposched.io/";
// The prefix of the node labels AWS's Neuron components set (UltraServer membership), kept by the
// decoder for the same reason; the keys are in claims/keys.h.
inline constexpr std::string_view kNeuronLabelPrefix = "neuron.amazonaws.com/";
// The prefixes of the pod labels the Kubeflow MPI operator and LeaderWorkerSet put on their pods
// (which job or group a pod belongs to), kept by the pod decoder (kube::IsPodLabelWeRead); the
// keys are in claims/keys.h.
inline constexpr std::string_view kKubeflowTrainingLabelPrefix = "training.kubeflow.org/";
inline constexpr std::string_view kLeaderWorkerSetLabelPrefix = "leaderworkerset.sigs.k8s.io/";

// Resource name -> whole-number quantity. Only extended resources (names with a '/', e.g.
// aws.amazon.com/neuron) are kept: they are always integers.
using ResourceCounts = std::map<std::string, int64_t, std::less<>>;

struct Container {
  std::string name;
  ResourceCounts requests;
  ResourceCounts limits;
  // Init containers with restartPolicy Always are sidecars: they run beside the app containers
  // for the pod's whole life, so their requests add up like app containers'.
  bool sidecar = false;
  // How many units a container asks for is claims' rule (claims::Asks), not kube's.
};

struct Pod {
  std::string ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string node_name;       // spec.nodeName; empty while unscheduled
  std::string scheduler_name;  // spec.schedulerName
  std::string hostname;        // spec.hostname (the MPI operator and LeaderWorkerSet set it)
  std::string subdomain;       // spec.subdomain (the job's headless service)
  std::string phase;           // status.phase
  std::string creation_timestamp;
  bool deleting = false;  // metadata.deletionTimestamp is set
  std::map<std::string, std::string, std::less<>> annotations;
  // Only the labels toposched reads (kube::IsPodLabelWeRead): the MPI operator's, LeaderWorkerSet's
  // and toposched.io/*, which say which gang a pod belongs to.
  std::map<std::string, std::string, std::less<>> labels;
  // The topologyKey of every spec.affinity.podAffinity term, required and preferred, in spec
  // order (AWS's UltraServer guide states a gang's node config as one of these).
  std::vector<std::string> pod_affinity_topology_keys;
  // Upstream's workload-aware scheduling (docs/ultraserver.md, "Gangs"), absent before 1.35:
  // spec.schedulingGroup.podGroupName (1.36+: a PodGroup in the pod's namespace) and
  // spec.workloadRef {name, podGroup, podGroupReplicaKey} (1.35 only: a Workload's pod group).
  std::string scheduling_group;  // podGroupName; "" when unset
  struct WorkloadRef {
    std::string name;
    std::string pod_group;
    std::string pod_group_replica_key;
    bool operator==(const WorkloadRef&) const = default;
  };
  std::optional<WorkloadRef> workload_ref;
  std::vector<Container> containers;
  std::vector<Container> init_containers;

  std::string Key() const { return ns + "/" + name; }
  // Succeeded or Failed: its devices are free again.
  bool Terminated() const { return phase == "Succeeded" || phase == "Failed"; }
};

struct Node {
  std::string name;
  std::string resource_version;
  std::string
      instance_type;  // node.kubernetes.io/instance-type, else beta.kubernetes.io/instance-type
  // Only the labels toposched reads (kube::IsNodeLabelWeRead): instance type, toposched.io/*.
  std::map<std::string, std::string, std::less<>> labels;
  // Only toposched.io/* annotations (kube::IsOwnKey): what its node agent says of it.
  std::map<std::string, std::string, std::less<>> annotations;
  ResourceCounts capacity;
  ResourceCounts allocatable;
  bool unschedulable = false;  // spec.unschedulable
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };

template <typename T>
struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  T object;                      // for ADDED/MODIFIED/DELETED
  std::string resource_version;  // the object's, or the bookmark's
  int error_code = 0;            // for ERROR: the Status code (410 = resource version too old)
  std::string error_message;
};

template <typename T>
struct ObjectList {
  std::string resource_version;
  std::string continue_token;
  std::vector<T> items;
};

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_OBJECTS_H_
