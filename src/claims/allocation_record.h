// The allocation record toposched writes on a pod when it binds it (the toposched.io/allocation
// annotation: ids per container and resource) as JSON, and its strict parsing back, and AWS's
// NEURON_ALLOC_TIME. Part of the pod contract, beside its keys (keys.h) and the other bind-time
// annotations (annotations.h).
#ifndef TOPOSCHED_CLAIMS_ALLOCATION_RECORD_H_
#define TOPOSCHED_CLAIMS_ALLOCATION_RECORD_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace toposched::claims {

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

// The record as compact JSON:
// {"node":"n","instanceType":"t","containers":[{"name":"c","resource":"r","ids":[0,1]}]}
std::string AllocationRecordJson(const AllocationRecord& record);

// Parses the toposched.io/allocation annotation strictly: malformed JSON, wrong types, missing
// fields, negative or huge ids are errors. Unknown fields are ignored so that newer writers stay
// readable.
Result<AllocationRecord> ParseAllocationRecord(std::string_view json);

// Parses NEURON_ALLOC_TIME: decimal digits only, fitting in int64.
Result<int64_t> ParseAllocTime(std::string_view text);

}  // namespace toposched::claims

#endif  // TOPOSCHED_CLAIMS_ALLOCATION_RECORD_H_
