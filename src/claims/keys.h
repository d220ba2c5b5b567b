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
// The kube::AllocationRecord as compact JSON (ids per container and resource).
inline constexpr std::string_view kAnnotationRecord = "toposched.io/allocation";
// The partition made for the pod in a shared pool (docs/pools.md).
inline constexpr std::string_view kAnnotationPartition = "toposched.io/partition";

// --- Pod annotation written by the device plugin. ---

// Which containers of a pod the plugin has served: "container=resource,...". NEURON_ALLOCATED
// stays pod-level (AWS's meaning).
inline constexpr std::string_view kAnnotationAllocatedContainers =
    "toposched.io/allocated-containers";

// --- Node labels. ---

// The node label that puts a node on a shared pool.
inline constexpr std::string_view kPoolLabel = topology::kPoolLabel;

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
static_assert(kPoolLabel.starts_with(kKeyPrefix));

}  // namespace toposched::claims

#endif  // TOPOSCHED_CLAIMS_KEYS_H_
