// Gangs: pods that must be placed together, one per node inside one UltraServer group (or several
// groups of the same size), and ranked. Which gang a pod belongs to is read from its own keys
// (GangOf); the rank and nodes chosen at bind travel on the pod as the gang record
// (toposched.io/gang-record), which the device plugin turns into the Neuron runtime's env
// (GangEnv) and a restarted extender reads to rebuild the gang. docs/ultraserver.md, "Gangs".
#ifndef TOPOSCHED_CLAIMS_GANG_H_
#define TOPOSCHED_CLAIMS_GANG_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "kube/objects.h"
#include "topology/limits.h"

namespace toposched::claims {

// The most members a gang, and so a rank, may count (its home: topology/limits.h).
using topology::kMaxGangSize;

struct GangMembership {
  // "<namespace>/<kind>:<name>": "default/gang:my-gang", "default/podgroup:train-0" (upstream's
  // PodGroup), "default/workload:train/workers" (a 1.35 Workload's pod group, "/<replica key>"
  // appended when the pod has one), "default/lws:serve/2" (group 2 of the LeaderWorkerSet
  // serve), "default/mpijob:train-a".
  std::string id;
  // Where the identity came from, for messages: "toposched.io/gang", "PodGroup", "Workload",
  // "LeaderWorkerSet", "MPIJob".
  std::string source;
  // Members in the gang; 0 = not known from the pod: the extender reads it from the object
  // job_name names (an MPIJob's Worker replicas, a PodGroup's or Workload pod group's gang
  // minCount).
  int size = 0;
  int group_nodes = 1;    // UltraServer node config: 1, 2 or 4
  int index = -1;         // the member's own index (a rank hint); -1 = none
  std::string job_name;   // the MPIJob's, PodGroup's or Workload's name (by source)
  std::string pod_group;  // the Workload's pod group (source Workload)

  bool operator==(const GangMembership&) const = default;
};

// The gang `pod` belongs to. nullopt: none (an MPIJob's launcher is none). An error names the
// malformed key.
//
// Identity, first found wins:
//   1. annotation toposched.io/gang (any pods; the name is namespace-local);
//   2. upstream's group, which kube-scheduler itself gates on (1.35+, GenericWorkload): pod field
//      spec.schedulingGroup.podGroupName (a PodGroup, 1.36+), else spec.workloadRef (a Workload's
//      pod group, 1.35). It comes before the job labels because a job controller that sets it
//      (1.37's Job controller does, behind WorkloadWithJob) means this group, not its own;
//   3. labels leaderworkerset.sigs.k8s.io/name and group-index (both required): one group;
//   4. label training.kubeflow.org/job-name with job-role=worker: the MPIJob's workers.
// Whether an upstream group is a gang at all is its object's policy (basic: no), which the
// extender reads with its size; here it is one with size 0.
// A job's own keys (LeaderWorkerSet's size, worker-index and exclusive-topology; the MPIJob's
// replica-index) count only when that job is the identity: a toposched.io/gang that regroups
// such pods takes its size and ranks from toposched.io/ annotations.
// Size: annotation leaderworkerset.sigs.k8s.io/size (the job's own) > toposched.io/gang-size > 0
//   (for an MPIJob, PodGroup or Workload: read from the object).
// Group nodes: toposched.io/ultraserver-nodes > LeaderWorkerSet's exclusive-topology naming
//   neuron.amazonaws.com/ultraserver-server-id-2 or -4 > the first pod-affinity topologyKey
//   that is one of those two labels (AWS's UltraServer guide's MPIJob rules) > 1.
// Index: toposched.io/gang-rank > leaderworkerset.sigs.k8s.io/worker-index >
//   training.kubeflow.org/replica-index > -1.
// Errors: a number that is not a decimal integer in range (size 1..kMaxGangSize, nodes 1, 2 or
// 4, index 0..kMaxGangSize-1), an empty name, one LeaderWorkerSet label without the other, a
// workloadRef without name or podGroup, a size that is not a multiple of group_nodes, an index
// not below a known size.
Result<std::optional<GangMembership>> GangOf(const kube::Pod& pod);

// What bind decided for one member, written on it as annotation toposched.io/gang-record.
struct GangRecord {
  std::string gang;  // GangMembership::id
  int size = 0;
  int group_nodes = 1;
  int rank = 0;                    // this member's rank, 0..size-1 (= NEURON_GLOBAL_TOPOID)
  std::vector<std::string> nodes;  // the node of each rank (size entries)
  std::string server_id;           // this member's UltraServer group for group_nodes (empty for 1)
  int node_id = -1;                // this member's node id inside that group (-1 for 1)
  std::string rank0_host;          // rank 0's host name (PodHostName), "" when unknown

  bool operator==(const GangRecord&) const = default;
};

// Compact JSON: {"gang":"..","size":4,"groupNodes":4,"rank":1,"nodes":[..],"serverId":"..",
// "nodeId":1,"rank0Host":".."}.
std::string EncodeGangRecord(const GangRecord& record);

// Parses the annotation strictly: wrong types, missing fields (all but serverId, nodeId and
// rank0Host are required) and inconsistent values are errors naming the annotation. Checks:
// 1 <= size <= kMaxGangSize, group_nodes in {1, 2, 4}, size a multiple of group_nodes,
// 0 <= rank < size, one non-empty node name per rank, and for group_nodes > 1 a server id and
// 0 <= node_id < group_nodes (for 1: neither). Unknown fields are ignored.
Result<GangRecord> DecodeGangRecord(std::string_view json);
// The record a bound member carries: nullopt without the annotation, an error when it is malformed.
// The extender's rebuild and the device plugin's Allocate both read it through here.
Result<std::optional<GangRecord>> GangRecordOf(const kube::Pod& pod);

// The runtime's NEURON_RT_ULTRASERVER_MODE for a node config (the driver's enum, as AWS's init
// script picks it): 4 -> 1 (X4), 2 -> 3 (X2V, the preferred 2-node mode), 1 -> 4 (X1); 0 (unset)
// for anything else.
int UltraServerModeFor(int group_nodes);

// The env a member's containers get: NEURON_RT_ULTRASERVER_MODE, NEURON_RT_ULTRASERVER_SERVER_ID
// (when server_id is set), NEURON_RT_ULTRASERVER_NODE_ID (when node_id >= 0),
// NEURON_GLOBAL_TOPOID (the rank) and NEURON_GLOBAL_TOPOID0_HOST (when rank0_host is set): what
// AWS's UltraServer init script writes to each worker's /etc/environment.
std::map<std::string, std::string> GangEnv(const GangRecord& record);

// The pod's DNS name through its headless service, as the MPI operator and LeaderWorkerSet set
// hostname and subdomain: "<hostname>.<subdomain>.<namespace>.svc"; the pod's name stands in for
// an unset hostname (as Kubernetes does). "" without a subdomain or a namespace.
std::string PodHostName(const kube::Pod& pod);

}  // namespace toposched::claims

#endif  // TOPOSCHED_CLAIMS_GANG_H_
