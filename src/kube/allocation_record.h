// The annotations toposched writes on a pod when it binds it, and their parsing back: the device
// plugin reads them at Allocate, and the extender rebuilds its state from them after a restart.
//
// AWS_NEURON_IDS, NEURON_ALLOCATED and NEURON_ALLOC_TIME keep AWS's own device plugin working with
// our extender; toposched.io/allocation is our richer record (ids per container and resource).
#ifndef TOPOSCHED_KUBE_ALLOCATION_RECORD_H_
#define TOPOSCHED_KUBE_ALLOCATION_RECORD_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace toposched::kube {

// Comma list of every container's ids, in kubelet's container order (init containers first, then
// app containers, each in spec order); an init container that reuses its pod's ids lists them
// again. Split back per container by topology::SplitIdGroups.
inline constexpr std::string_view kAnnotationNeuronIds = "AWS_NEURON_IDS";
// "false" when the extender writes it; AWS's plugin sets "true" after Allocate.
inline constexpr std::string_view kAnnotationAllocated = "NEURON_ALLOCATED";
// Unix time in nanoseconds, as a decimal string.
inline constexpr std::string_view kAnnotationAllocTime = "NEURON_ALLOC_TIME";
// The AllocationRecord as compact JSON.
inline constexpr std::string_view kAnnotationRecord = "toposched.io/allocation";

struct ContainerIds {
  std::string container;
  std::string resource;  // e.g. aws.amazon.com/neuron or aws.amazon.com/neuroncore
  std::vector<int> ids;  // device ids for device resources, core ids for core resources

  bool operator==(const ContainerIds&) const = default;
};

struct AllocationRecord {
  std::string node;
  std::string instance_type;
  std::vector<ContainerIds> containers;

  bool operator==(const AllocationRecord&) const = default;
};

// The four annotations for a pod bound with `record` at `alloc_time_ns`.
std::map<std::string, std::string> AllocationAnnotations(const AllocationRecord& record,
                                                         int64_t alloc_time_ns);

// The record as compact JSON:
// {"node":"n","instanceType":"t","containers":[{"name":"c","resource":"r","ids":[0,1]}]}
std::string AllocationRecordJson(const AllocationRecord& record);

// Parses kAnnotationRecord strictly: malformed JSON, wrong types, missing fields, negative or huge
// ids are errors. Unknown fields are ignored so that newer writers stay readable.
Result<AllocationRecord> ParseAllocationRecord(std::string_view json);

// Parses NEURON_ALLOC_TIME: decimal digits only, fitting in int64.
Result<int64_t> ParseAllocTime(std::string_view text);

}  // namespace toposched::kube

#endif  // TOPOSCHED_KUBE_ALLOCATION_RECORD_H_
