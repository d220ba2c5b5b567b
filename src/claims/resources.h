// The extended resources toposched manages and how many units of them a container asks for: the
// one counting rule the extender (placement, restart rebuild) and the device plugin (Allocate)
// share, so that both always agree on a container's size.
#ifndef TOPOSCHED_CLAIMS_RESOURCES_H_
#define TOPOSCHED_CLAIMS_RESOURCES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "claims/keys.h"
#include "kube/objects.h"
#include "topology/allocator.h"

namespace toposched::claims {

// One resource: the name it is advertised under, what one unit of it is, and other names a pod
// or a record may use for the same thing (the retired aws.amazon.com/neurondevice for devices).
struct ResourceSpec {
  std::string name;  // e.g. aws.amazon.com/neuron
  topology::Unit unit = topology::Unit::kDevice;
  std::vector<std::string> aliases;

  bool Matches(std::string_view resource) const;
};

// The resources the extender manages, by unit: every name in a list is the same resource (the
// first is its name, the rest aliases), and a container's asks under them add up.
struct ResourceSet {
  std::vector<std::string> device = {std::string(kResourceNeuron),
                                     std::string(kResourceNeuronDevice)};
  std::vector<std::string> core = {std::string(kResourceNeuronCore)};

  bool Manages(std::string_view name) const;
  // Devices then cores, each non-empty list as one ResourceSpec.
  std::vector<ResourceSpec> Specs() const;
};

// The device plugin's resources: devices as `device_resource` (with the alias neurondevice when
// it is aws.amazon.com/neuron), cores as `core_resource`. An empty name leaves that resource out.
std::vector<ResourceSpec> DefaultResources(const std::string& device_resource,
                                           const std::string& core_resource);

// How many of an extended resource the container asks for: its limit, else its request (the API
// server requires the two to be equal when both are set; kubelet allocates the limit). THE rule.
int64_t Asks(const kube::Container& container, std::string_view resource);

// Asks summed over the resource's name and aliases. `asked_as`, when given, gets the first of
// those names the container asks for (empty when none).
int64_t AsksWithAliases(const kube::Container& container, const ResourceSpec& spec,
                        std::string* asked_as = nullptr);

// One container's ask for one resource.
struct ContainerAsk {
  std::string container;
  std::string resource;  // the ResourceSpec's name
  std::string asked_as;  // the first of its names the container uses
  topology::Unit unit = topology::Unit::kDevice;
  int count = 0;
  bool init = false;  // an init container that is not a sidecar (runs before the app containers)
  int order = 0;      // the container's index in kubelet's order
};

// Every non-zero ask of the pod's containers for `resources`, in kubelet's container order (init
// containers first, then app containers, each in spec order), and within a container in the
// order of `resources`: the order AWS_NEURON_IDS lists them. Sidecars (init containers with
// restartPolicy Always) count as app containers. Errors on a count that does not fit an int.
Result<std::vector<ContainerAsk>> ListAsks(const kube::Pod& pod,
                                           const std::vector<ResourceSpec>& resources);

}  // namespace toposched::claims

#endif  // TOPOSCHED_CLAIMS_RESOURCES_H_
