// What a container is given for the Neuron units it holds: its /dev/neuronN nodes and the
// runtime's environment (NEURON_RT_VISIBLE_CORES, and the logical core size on trn2/trn3). The
// same for both node agents: the device plugin's Allocate answer and the DRA plugin's CDI spec.
#ifndef TOPOSCHED_NODEAGENT_CONTAINER_SETUP_H_
#define TOPOSCHED_NODEAGENT_CONTAINER_SETUP_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "topology/allocator.h"

namespace toposched::nodeagent {

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

}  // namespace toposched::nodeagent

#endif  // TOPOSCHED_NODEAGENT_CONTAINER_SETUP_H_
