// A resource.k8s.io/v1 ResourceClaim as NodePrepareResources reads it: its identity, the devices
// the scheduler allocated (status.allocation.devices.results) and the opaque configs that may
// apply to them (spec.devices.config and status.allocation.devices.config). Everything else in
// the object is skipped unread. The JSON comes from the API server; the decoder is strict about
// the parts it reads and reports the JSON path of what is wrong.
#ifndef TOPOSCHED_DRAPLUGIN_RESOURCE_CLAIM_H_
#define TOPOSCHED_DRAPLUGIN_RESOURCE_CLAIM_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

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

struct ResourceClaimView {
  std::string ns;
  std::string name;
  std::string uid;
  bool allocated = false;  // status.allocation is present
  std::vector<AllocatedDevice> results;
  std::vector<ClaimConfig> spec_configs;
  std::vector<ClaimConfig> status_configs;
};

Result<ResourceClaimView> DecodeResourceClaim(std::string_view json);

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_RESOURCE_CLAIM_H_
