// A resource.k8s.io/v1 ResourceClaim as NodePrepareResources reads it: its identity, the devices
// the scheduler allocated (status.allocation.devices.results), the opaque configs that may apply
// to them (spec.devices.config and status.allocation.devices.config) and its consumers
// (status.reservedFor: the pods told when one of its devices fails). Everything else in
// the object is skipped unread. The JSON comes from the API server; the decoder is strict about
// the parts it reads and reports the JSON path of what is wrong.
#ifndef TOPOSCHED_DRAPLUGIN_RESOURCE_CLAIM_H_
#define TOPOSCHED_DRAPLUGIN_RESOURCE_CLAIM_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "kube/client.h"

namespace toposched::draplugin {

struct AllocatedDevice {
  std::string request;  // "req", or "req/subrequest" for a firstAvailable alternative
  std::string driver;
  std::string pool;
  std::string device;
  bool admin_access = false;
  bool operator==(const AllocatedDevice&) const = default;
};

// One entry of spec.devices.config or status.allocation.devices.config with an opaque part.
struct ClaimConfig {
  enum class Source { kClass, kClaim };
  Source source = Source::kClaim;     // spec.devices.config entries are the claim's
  std::vector<std::string> requests;  // empty: every request of the claim
  std::string driver;
  std::string parameters;  // the raw JSON of opaque.parameters; empty when absent or null
  bool operator==(const ClaimConfig&) const = default;
};

// One entry of status.reservedFor: the pods (resource "pods", core group) that use the claim.
struct ClaimConsumer {
  std::string api_group;  // "" for pods
  std::string resource;   // "pods"
  std::string name;
  std::string uid;
  bool operator==(const ClaimConsumer&) const = default;
};

struct ResourceClaimView {
  std::string ns;
  std::string name;
  std::string uid;
  bool allocated = false;  // status.allocation is present
  std::vector<AllocatedDevice> results;
  std::vector<ClaimConfig> spec_configs;
  std::vector<ClaimConfig> status_configs;
  std::vector<ClaimConsumer> reserved_for;
};

Result<ResourceClaimView> DecodeResourceClaim(std::string_view json);

// GETs and decodes ResourceClaim ns/name; errors name the claim ("not found" for a 404).
Result<ResourceClaimView> ReadResourceClaim(kube::ApiClient& api, std::string_view ns,
                                            std::string_view name);

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_RESOURCE_CLAIM_H_
