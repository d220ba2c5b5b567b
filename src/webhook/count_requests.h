// Count requests through DRA: a pod written for the device plugin (`aws.amazon.com/neuron: 4`)
// rewritten at creation into a ResourceClaim that can only be allocated a legal set. Kubernetes'
// own route for such pods (KEP-5004, DeviceClass extendedResourceName) generates a claim for "any
// N devices", with no constraint, so on a Neuron node it picks sets the runtime refuses; this is
// the admission-time rewrite instead (docs/dra.md, "Count requests"). Pure: no I/O, no clock.
//
// For each app container asking N devices (or N cores), the pod gets one claim from the
// ResourceClaimTemplate of that size in its namespace (TemplateName), the container's
// resources.claims names it, and the extended resource leaves its limits and requests. A device
// template's one request is a `firstAvailable` list, tried in order on each node:
//   1. `aligned`: N whole devices of class neuron.aws.com, all with the same
//      resource.aws.com/devicegroupN_id (Trainium: every legal set of N is one aligned group;
//      a node whose devices carry no such attribute cannot satisfy it); for N = 1 any device;
//   2. `set`: one device of class neurondevices.toposched.io whose deviceCount is N (a legal set
//      published as a device of its own: an Inferentia ring's consecutive devices).
// A core template asks one neuroncores.toposched.io range of N cores (the nodes must publish
// core ranges: `dra-plugin --core-offers`).
#ifndef TOPOSCHED_WEBHOOK_COUNT_REQUESTS_H_
#define TOPOSCHED_WEBHOOK_COUNT_REQUESTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "topology/allocator.h"

namespace toposched::webhook {

// Larger asks are refused: no Neuron node has more devices or cores than this.
inline constexpr int64_t kMaxCount = 512;

// A size of claim: N devices or N cores.
struct ClaimSize {
  topology::Unit unit = topology::Unit::kDevice;
  int64_t count = 0;
  bool operator==(const ClaimSize&) const = default;
};

// "toposched-neuron-devices-4-v1", "toposched-neuron-cores-2-v1". The version changes when the
// template's content does, so a new webhook never reuses a template of an older form.
std::string TemplateName(const ClaimSize& size);
// The ResourceClaimTemplate (resource.k8s.io/v1) of `size` in namespace `ns`, as JSON.
std::string TemplateJson(std::string_view ns, const ClaimSize& size);

// What to answer one AdmissionReview.
struct Decision {
  std::string uid;       // request.uid, echoed in the response
  std::string ns;        // request.namespace
  std::string pod;       // the pod's name, or its generateName followed by "*"
  bool dry_run = false;  // request.dryRun: answer, but create nothing
  bool allowed = true;
  std::string message;  // why it was refused (allowed == false)
  std::string patch;    // a JSON Patch (RFC 6902) as JSON; empty: the pod is left as it is
  std::vector<ClaimSize> templates;   // must exist in `ns` before the answer (each size once)
  std::vector<std::string> rewrites;  // "main: aws.amazon.com/neuron 4 -> claim toposched-neuron-0"
};

// Reads an AdmissionReview (admission.k8s.io/v1) of a pod. A pod asking no Neuron resource, or an
// operation other than CREATE, is allowed unchanged. Refused, with a message saying why: an init
// container asking (its devices would be held for the pod's life), one container asking devices
// and cores, a count over kMaxCount, a claim name already taken, a pod that cannot be read (a
// bad quantity). An error (not a decision) for a body that is no AdmissionReview: the caller
// answers 400.
Result<Decision> Decide(std::string_view admission_review);

// The AdmissionReview answer to `decision` (the patch base64-encoded, as the API server wants it).
std::string ResponseJson(const Decision& decision);

}  // namespace toposched::webhook

#endif  // TOPOSCHED_WEBHOOK_COUNT_REQUESTS_H_
