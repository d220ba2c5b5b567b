// The annotations a bound pod carries, both directions: what bind writes (AllocationAnnotations,
// with AWS_NEURON_IDS from FormatAwsIds) and how a record is read back from a pod (the extender's
// restart rebuild and the device plugin's Allocate both call RecordFromPod). AWS_NEURON_IDS is
// written and split in kubelet's container order only here.
#ifndef TOPOSCHED_CLAIMS_ANNOTATIONS_H_
#define TOPOSCHED_CLAIMS_ANNOTATIONS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "claims/allocation_record.h"
#include "claims/keys.h"
#include "claims/resources.h"
#include "kube/objects.h"

namespace toposched::claims {

// AWS_NEURON_IDS for `record`: every container's ids one after another, as a plain comma list, in
// the order of record.containers, which must be kubelet's container order (init containers first,
// then app containers, each in spec order; within a container, devices before cores).
std::string FormatAwsIds(const claims::AllocationRecord& record);

// Splits AWS_NEURON_IDS into consecutive groups of counts[i] ids, in the order written (not
// sorted; an init container that reuses its pod's ids lists them again). Ids lie in
// [0, topology::kMaxCores). Errors name the annotation and quote the bad part.
Result<std::vector<std::vector<int>>> SplitAwsIds(std::string_view text,
                                                  const std::vector<int>& counts);

// The four annotations for a pod bound with `record` at `alloc_time_ns`: AWS_NEURON_IDS,
// NEURON_ALLOCATED "false", NEURON_ALLOC_TIME and toposched.io/allocation.
std::map<std::string, std::string> AllocationAnnotations(const claims::AllocationRecord& record,
                                                         int64_t alloc_time_ns);

// A pod placed by AWS's extender carries only AWS_NEURON_IDS. Splits it over the pod's asks for
// `resources` (ListAsks: kubelet's order) into a record on the pod's node; each container's
// resource is the name it asked under.
Result<claims::AllocationRecord> RecordFromAwsIds(const kube::Pod& pod, std::string_view text,
                                                  const std::vector<ResourceSpec>& resources);

// Whether the pod carries an allocation: toposched.io/granted, toposched.io/allocation or
// AWS_NEURON_IDS.
bool HasAllocation(const kube::Pod& pod);

// The allocation the pod's annotations record: toposched.io/granted when present (what the
// containers really got, written by the device plugin from kubelet's books), else
// toposched.io/allocation (what bind reserved), both parsed strictly, else AWS_NEURON_IDS split by
// RecordFromAwsIds. Errors name the annotation; a pod with none is an error too ("no allocation
// record").
Result<claims::AllocationRecord> RecordFromPod(const kube::Pod& pod,
                                               const std::vector<ResourceSpec>& resources);

// toposched.io/allocated-containers (the device plugin's mark of what it has served), both
// directions: a claim's key "container=resource", the annotation's value for a set of keys
// (comma-joined, in the order given), and the keys a value holds (empty items skipped).
std::string ServedKey(std::string_view container, std::string_view resource);
std::string FormatServedKeys(const std::vector<std::string>& keys);
std::set<std::string> ParseServedKeys(std::string_view text);

}  // namespace toposched::claims

#endif  // TOPOSCHED_CLAIMS_ANNOTATIONS_H_
