// Turning a Pod's container requests for our resources into the tracker's PodSpec.
#ifndef TOPOSCHED_EXTENDER_POD_REQUESTS_H_
#define TOPOSCHED_EXTENDER_POD_REQUESTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "claims/gang.h"
#include "claims/resources.h"
#include "kube/objects.h"
#include "tracker/tracker.h"

namespace toposched::extender {

// The extended-resource names toposched manages (claims owns them and the counting rule).
using ResourceNames = claims::ResourceSet;

// A pod's requests plus, for each ContainerRequest, the resource name it came from (so the
// recorded allocation names the resource the pod really asked for).
struct PodRequests {
  tracker::PodSpec spec;
  std::vector<std::string> resource_of;  // parallel to spec.containers
  std::string ns;
  std::string name;
  std::string node_name;
  // A member of a multi-node gang (claims::GangOf), its host name for the gang's rank 0
  // (claims::PodHostName), and, once bound, the gang record it was bound with.
  std::optional<claims::GangMembership> gang;
  // Why the pod's gang keys could not be read; filter and bind refuse the pod with it, but its
  // recorded ids are still held (a typo in an annotation must not free a running pod's devices).
  std::string gang_error;
  std::string host;
  std::optional<claims::GangRecord> gang_record;
  // metadata.creationTimestamp as Unix seconds: how long a pending pod has waited. Empty for a
  // bound pod (not read) and when the pod carries none the parser reads (kube::ParseRfc3339);
  // such a pod is never held back.
  std::optional<int64_t> created_unix_s;

  // The resource name for a placed container (matched by container name and unit).
  std::string ResourceFor(const std::string& container, topology::Unit unit) const;
};

// Every managed resource a container asks for (claims::ListAsks: limit, else request, names of
// one resource added up), in kubelet's container order. Sidecars (init containers with
// restartPolicy Always) count as app containers. Errors on a count that does not fit an int.
// Malformed gang keys (gang_error) and a malformed gang record on a bound pod are not errors here:
// the pod's ids must still be held; the record is logged and left out.
Result<PodRequests> RequestsOf(const kube::Pod& pod, const ResourceNames& names);

// The request a pod waits with in the queue that --hold-back-hours counts
// (topology::WaitingClass): an unbound pod, no gang member, asking through one container.
// Empty for every other pod.
std::optional<topology::Request> WaitingRequestOf(const PodRequests& pod);

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_POD_REQUESTS_H_
