// Every annotation, label and resource name in toposched's pod/node contract, in one place. The
// extender writes these keys, the device plugin and a restarted extender read them back, and
// AWS's own extender and device plugin share the AWS_* and NEURON_* ones with us.
//
// Two keys are defined below this module, because the layer that needs them must not depend on
// claims: the pool label (topology/pools.h, named in topology's errors) and the toposched.io/
// prefix (kube/decode.h, which keeps only the node labels we read). They are re-exported here so
// that everyone above those layers names every key through this header.
#ifndef TOPOSCHED_CLAIMS_KEYS_H_
#define TOPOSCHED_CLAIMS_KEYS_H_

#include <map>
#include <string>
#include <string_view>

#include "kube/objects.h"
#include "topology/pools.h"

namespace toposched::claims {

// The prefix of our own annotations and labels.
inline constexpr std::string_view kKeyPrefix = kube::kOwnKeyPrefix;

// --- Pod annotations written at bind (the Binding carries them). ---

// Comma list of every container's ids, in kubelet's container order (init containers first, then
// app containers, each in spec order); an init container that reuses its pod's ids lists them
// again. Written by FormatAwsIds, split back per container by SplitAwsIds (claims/annotations.h).
inline constexpr std::string_view kAnnotationNeuronIds = "AWS_NEURON_IDS";
// "false" when the extender writes it; a device plugin sets "true" once every container is served.
inline constexpr std::string_view kAnnotationAllocated = "NEURON_ALLOCATED";
// Unix time in nanoseconds, as a decimal string.
inline constexpr std::string_view kAnnotationAllocTime = "NEURON_ALLOC_TIME";
// The claims::AllocationRecord as compact JSON (ids per container and resource).
inline constexpr std::string_view kAnnotationRecord = "toposched.io/allocation";
// The partition made for the pod in a shared pool (docs/pools.md).
inline constexpr std::string_view kAnnotationPartition = "toposched.io/partition";

// --- Pod annotation written by the device plugin. ---

// Which containers of a pod the plugin has served: "container=resource,...". NEURON_ALLOCATED
// stays pod-level (AWS's meaning).
inline constexpr std::string_view kAnnotationAllocatedContainers =
    "toposched.io/allocated-containers";
// What the pod's containers really hold, as kubelet booked it (its PodResources), written by the
// device plugin when that differs from toposched.io/allocation or the pod has none. Same JSON as
// toposched.io/allocation; claims::RecordFromPod prefers it, so the extender's books follow what
// the containers got (issue 18).
inline constexpr std::string_view kAnnotationGranted = "toposched.io/granted";

// --- Gangs (claims/gang.h; docs/ultraserver.md, "Gangs" and "The gang record"). ---

// Pod annotations a user sets to make a gang of any pods (they win over the job's own labels).
// The gang's name, namespace-local.
inline constexpr std::string_view kAnnotationGang = "toposched.io/gang";
// How many members the gang has, an integer >= 1.
inline constexpr std::string_view kAnnotationGangSize = "toposched.io/gang-size";
// How many UltraServer nodes one group of the gang spans: 1, 2 or 4 (AWS's "node config").
inline constexpr std::string_view kAnnotationUltraServerNodes = "toposched.io/ultraserver-nodes";
// A hint for this member's rank, an integer >= 0.
inline constexpr std::string_view kAnnotationGangRank = "toposched.io/gang-rank";
// Written at bind: the member's rank and the gang's nodes as compact JSON (claims::GangRecord).
// The device plugin turns it into the runtime's env; a restarted extender rebuilds the gang.
inline constexpr std::string_view kAnnotationGangRecord = "toposched.io/gang-record";

// The Kubeflow MPI operator's pod labels (kubeflow/common pkg/apis/common/v1/constants.go:
// JobNameLabel, JobRoleLabel, ReplicaIndexLabel; checked in the source, and the job-name and
// job-role=worker pair is what AWS's UltraServer guide's affinity rules select on).
inline constexpr std::string_view kLabelMpiJobName = "training.kubeflow.org/job-name";
// "launcher" or "worker"; only workers are gang members.
inline constexpr std::string_view kLabelMpiJobRole = "training.kubeflow.org/job-role";
inline constexpr std::string_view kMpiJobRoleWorker = "worker";
// The worker's index, 0..workers-1.
inline constexpr std::string_view kLabelMpiReplicaIndex = "training.kubeflow.org/replica-index";

// LeaderWorkerSet's pod labels and annotations (checked against LWS's reference page, "Labels,
// Annotations and Environment Variables": group-index on every pod of a group, worker-index 0
// for the leader, size and exclusive-topology as pod annotations).
inline constexpr std::string_view kLabelLwsName = "leaderworkerset.sigs.k8s.io/name";
inline constexpr std::string_view kLabelLwsGroupIndex = "leaderworkerset.sigs.k8s.io/group-index";
inline constexpr std::string_view kLabelLwsWorkerIndex = "leaderworkerset.sigs.k8s.io/worker-index";
// The group's size (LeaderWorkerSet.spec.leaderWorkerTemplate.size), leader included.
inline constexpr std::string_view kAnnotationLwsSize = "leaderworkerset.sigs.k8s.io/size";
// The node label whose value a group has to itself (1:1 exclusive placement).
inline constexpr std::string_view kAnnotationLwsExclusiveTopology =
    "leaderworkerset.sigs.k8s.io/exclusive-topology";

// --- Container env the Neuron runtime reads, set by the device plugin and the DRA driver. ---

// The cores a container may use, numbered as the runtime sees them ("0-3", "4,5").
inline constexpr std::string_view kEnvVisibleCores = "NEURON_RT_VISIBLE_CORES";
// The logical NeuronCore size (LNC) the cores are numbered at; also the key of the node's Neuron
// runtime config file that says which LNC the node runs (deviceplugin/sysfs).
inline constexpr std::string_view kEnvLogicalNcConfig = "NEURON_LOGICAL_NC_CONFIG";

// --- Container env the device plugin sets from the gang record: the variables AWS's
// UltraServer init script writes to each MPI worker's /etc/environment. ---

// The runtime's UltraServer mode: 1 = X4 (4 nodes), 3 = X2V (2 nodes, vertical links), 4 = X1.
inline constexpr std::string_view kEnvUltraServerMode = "NEURON_RT_ULTRASERVER_MODE";
inline constexpr std::string_view kEnvUltraServerServerId = "NEURON_RT_ULTRASERVER_SERVER_ID";
inline constexpr std::string_view kEnvUltraServerNodeId = "NEURON_RT_ULTRASERVER_NODE_ID";
// The member's rank (topology id) and rank 0's host name.
inline constexpr std::string_view kEnvGlobalTopoId = "NEURON_GLOBAL_TOPOID";
inline constexpr std::string_view kEnvGlobalTopoId0Host = "NEURON_GLOBAL_TOPOID0_HOST";

// --- Node labels. ---

// The node label that puts a node on a shared pool.
inline constexpr std::string_view kPoolLabel = topology::kPoolLabel;
// The LNC the node's Neuron driver runs at (1 or 2 on Trn2), as the device plugin read it from
// the driver's config; the extender takes the node's LNC from it before anything else.
inline constexpr std::string_view kLabelNeuronLnc = "toposched.io/neuron-lnc";
// Who hands out the node's devices: "dra" for toposched's DRA driver (`toposched dra-plugin`,
// docs/dra.md); absent or "device-plugin" for the device plugin and the extender. The two must
// never manage one node: each refuses, or leaves alone, a node the label gives the other.
inline constexpr std::string_view kLabelNeuronManagement = "toposched.io/neuron-management";
inline constexpr std::string_view kNeuronManagementDra = "dra";
// On each ResourceSlice the DRA plugin publishes: a digest of its content without the pool's
// generation, so that an unchanged plan (also after a restart) writes nothing.
inline constexpr std::string_view kAnnotationSliceDigest = "toposched.io/slice-digest";
inline bool ManagedByDra(const std::map<std::string, std::string, std::less<>>& node_labels) {
  const auto it = node_labels.find(kLabelNeuronManagement);
  return it != node_labels.end() && it->second == kNeuronManagementDra;
}
// Set by the device plugin on its node while any of its devices is out of service (failed its
// health check: device node gone, sysfs unreadable): their ids in the compact form ("2,9",
// topology/id_ranges.h); removed when all are healthy again. The extender never chooses a set
// containing them and tells the pods that hold them (docs/device-plugin.md, "When a device fails").
inline constexpr std::string_view kAnnotationUnhealthyDevices = "toposched.io/unhealthy-devices";
// Beside it, for people: each failed device, since when and why ("2: /dev/neuron2 is missing,
// since 2026-11-29T12:00:00Z"). Quoted in the events about the pods on them, never parsed.
inline constexpr std::string_view kAnnotationUnhealthyWhy = "toposched.io/unhealthy-devices-why";
// The condition the extender (device-plugin pods) and the DRA plugin (pods of claims) set on a pod
// holding a device that failed ("False", kReasonDeviceFailed) and set back ("True",
// kReasonDevicesInService) when it returns, beside a Warning event kEventDeviceFailed.
inline constexpr std::string_view kConditionDevicesHealthy = "toposched.io/NeuronDevicesHealthy";
inline constexpr std::string_view kReasonDeviceFailed = "DeviceFailed";
inline constexpr std::string_view kReasonDevicesInService = "DevicesInService";
inline constexpr std::string_view kEventDeviceFailed = "NeuronDeviceFailed";
// The same condition and a Warning event on the other members of a gang one of whose members
// holds a failed device: the gang's collective needs every rank (docs/extender.md).
inline constexpr std::string_view kReasonGangMemberDeviceFailed = "GangMemberDeviceFailed";
inline constexpr std::string_view kEventGangMemberDeviceFailed = "NeuronGangMemberDeviceFailed";
// Set by the device plugin on its node while kubelet still lists DRA claims of toposched's
// driver prepared in the node's pool (the node ran the DRA driver before its label was removed):
// how many DRA devices they hold. Removed once none is left. The extender offers no node that
// carries it (docs/dra.md, "Switching a node").
inline constexpr std::string_view kLabelDraClaimsHeld = "toposched.io/dra-claims-held";
// The label's value, or empty when the node carries none.
inline std::string_view DraClaimsHeld(
    const std::map<std::string, std::string, std::less<>>& node_labels) {
  const auto it = node_labels.find(kLabelDraClaimsHeld);
  return it == node_labels.end() ? std::string_view() : std::string_view(it->second);
}

// On a namespace or a pod: "true" sends the pod's count requests (aws.amazon.com/neuron: N, ...)
// through DRA: `toposched admission-webhook` rewrites them into ResourceClaims at creation
// (docs/dra.md, "Count requests"). The chart's MutatingWebhookConfiguration selects on it.
inline constexpr std::string_view kLabelNeuronDra = "toposched.io/neuron-dra";
// Set by that webhook on each pod it rewrote: what the containers asked for, e.g.
// "main=aws.amazon.com/neuron:4", so the original request stays visible.
inline constexpr std::string_view kAnnotationCountRequests = "toposched.io/count-requests";

// --- Extended resources (the defaults of claims::ResourceSet and claims::DefaultResources). ---

inline constexpr std::string_view kResourceNeuron = "aws.amazon.com/neuron";
// The retired name for whole devices, still accepted as an alias of kResourceNeuron.
inline constexpr std::string_view kResourceNeuronDevice = "aws.amazon.com/neurondevice";
inline constexpr std::string_view kResourceNeuronCore = "aws.amazon.com/neuroncore";

// --- UltraServer node labels, as AWS's device plugin sets them (claims/ultraserver.h reads them).

// The node configs the node supports, e.g. "1_2_4": 1 = alone, 2 = a 2-node half, 4 = all four.
inline constexpr std::string_view kLabelUltraServerMode = "neuron.amazonaws.com/ultraserver-mode";
// The UltraServer the node is in (shared by its four nodes) and its index in it, 0..3.
inline constexpr std::string_view kLabelUltraServerServerId4 =
    "neuron.amazonaws.com/ultraserver-server-id-4";
inline constexpr std::string_view kLabelUltraServerNodeId4 =
    "neuron.amazonaws.com/ultraserver-node-id-4";
// The 2-node half the node is in (shared by a pair) and its index in it, 0..1.
inline constexpr std::string_view kLabelUltraServerServerId2 =
    "neuron.amazonaws.com/ultraserver-server-id-2";
inline constexpr std::string_view kLabelUltraServerNodeId2 =
    "neuron.amazonaws.com/ultraserver-node-id-2";

static_assert(kAnnotationRecord.starts_with(kKeyPrefix));
static_assert(kLabelUltraServerMode.starts_with(kube::kNeuronLabelPrefix));
static_assert(kLabelUltraServerServerId4.starts_with(kube::kNeuronLabelPrefix));
static_assert(kLabelUltraServerNodeId4.starts_with(kube::kNeuronLabelPrefix));
static_assert(kLabelUltraServerServerId2.starts_with(kube::kNeuronLabelPrefix));
static_assert(kLabelUltraServerNodeId2.starts_with(kube::kNeuronLabelPrefix));
static_assert(kAnnotationPartition.starts_with(kKeyPrefix));
static_assert(kAnnotationAllocatedContainers.starts_with(kKeyPrefix));
static_assert(kAnnotationGranted.starts_with(kKeyPrefix));
// The node decoder keeps only labels under our prefix (kube::kOwnKeyPrefix).
static_assert(kLabelNeuronLnc.starts_with(kKeyPrefix));
static_assert(kLabelNeuronManagement.starts_with(kKeyPrefix));
static_assert(kLabelDraClaimsHeld.starts_with(kKeyPrefix));
static_assert(kAnnotationSliceDigest.starts_with(kKeyPrefix));
static_assert(kPoolLabel.starts_with(kKeyPrefix));
static_assert(kAnnotationGang.starts_with(kKeyPrefix));
static_assert(kAnnotationGangSize.starts_with(kKeyPrefix));
static_assert(kAnnotationUltraServerNodes.starts_with(kKeyPrefix));
static_assert(kAnnotationGangRank.starts_with(kKeyPrefix));
static_assert(kAnnotationGangRecord.starts_with(kKeyPrefix));
// The pod decoder keeps only labels under these prefixes (kube::IsPodLabelWeRead).
static_assert(kLabelMpiJobName.starts_with(kube::kKubeflowTrainingLabelPrefix));
static_assert(kLabelMpiJobRole.starts_with(kube::kKubeflowTrainingLabelPrefix));
static_assert(kLabelMpiReplicaIndex.starts_with(kube::kKubeflowTrainingLabelPrefix));
static_assert(kLabelLwsName.starts_with(kube::kLeaderWorkerSetLabelPrefix));
static_assert(kLabelLwsGroupIndex.starts_with(kube::kLeaderWorkerSetLabelPrefix));
static_assert(kLabelLwsWorkerIndex.starts_with(kube::kLeaderWorkerSetLabelPrefix));
static_assert(kAnnotationLwsSize.starts_with(kube::kLeaderWorkerSetLabelPrefix));
static_assert(kAnnotationLwsExclusiveTopology.starts_with(kube::kLeaderWorkerSetLabelPrefix));

}  // namespace toposched::claims

#endif  // TOPOSCHED_CLAIMS_KEYS_H_
