// The ids the plugin advertises to kubelet and how they map to the allocator's integers.
//
// Devices are "neuron0".."neuronN-1" (as /dev/neuronN); cores are "neuroncore0".. numbered
// node-wide (device * cores_per_device + k, in logical cores at the node's LNC), exactly the ids
// the extender records in the pod's annotations.
#ifndef TOPOSCHED_NODEAGENT_DEVICE_IDS_H_
#define TOPOSCHED_NODEAGENT_DEVICE_IDS_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "claims/resources.h"
#include "topology/allocator.h"

namespace toposched::nodeagent {

inline constexpr std::string_view kDeviceIdPrefix = "neuron";
inline constexpr std::string_view kCoreIdPrefix = "neuroncore";

// One resource this plugin serves: its name, unit and aliases (claims/resources.h).
using ResourceSpec = claims::ResourceSpec;

std::string UnitId(topology::Unit unit, int index);
// "neuron3" -> 3. Errors on a wrong prefix, non-digits, leading zeros or index >= limit.
Result<int> ParseUnitId(topology::Unit unit, std::string_view id, int limit);
// Parses every id; the first bad one is the error. The result is sorted ascending.
Result<std::vector<int>> ParseUnitIds(topology::Unit unit, const std::vector<std::string>& ids,
                                      int limit);
std::vector<std::string> UnitIds(topology::Unit unit, const std::vector<int>& indexes);

}  // namespace toposched::nodeagent

#endif  // TOPOSCHED_NODEAGENT_DEVICE_IDS_H_
