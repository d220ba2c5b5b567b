// What NodePrepareResources makes of one allocated ResourceClaim, as a pure function of the
// node's shape and the claim: which of its devices are this node's, what each is (dra::Offer),
// the opaque configs that apply, and what the claim's containers get (device nodes per device,
// NEURON_RT_VISIBLE_CORES and friends for the claim). Every reason a claim cannot be prepared is
// an error that says what is wrong with which part of the claim.
#ifndef TOPOSCHED_DRAPLUGIN_PREPARE_H_
#define TOPOSCHED_DRAPLUGIN_PREPARE_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "deviceplugin/allocation.h"
#include "dra/offers.h"
#include "draplugin/resource_claim.h"
#include "topology/allocator.h"

namespace toposched::draplugin {

// CDI kind of the devices this driver prepares.
inline constexpr std::string_view kCdiKind = "neuron.aws.com/device";

struct PreparedDevice {
  std::string device;  // the DRA device name (dra/offers.h)
  std::string pool;
  std::vector<std::string> requests;  // the claim's requests it was allocated for
  bool admin_access = false;          // monitoring access: it holds nothing
  dra::Offer offer;
  std::vector<std::string> device_nodes;  // "/dev/neuronN", the same path in the container
  bool operator==(const PreparedDevice&) const = default;
};

struct PreparedClaim {
  std::string uid;
  std::string ns;
  std::string name;
  std::vector<PreparedDevice> devices;
  // For every container that uses the claim: NEURON_RT_VISIBLE_CORES (+ NEURON_LOGICAL_NC_CONFIG,
  // NEURON_RT_ULTRASERVER_MODE when set).
  std::map<std::string, std::string> env;
  bool operator==(const PreparedClaim&) const = default;

  std::string CdiName(const PreparedDevice& device) const { return uid + "-" + device.device; }
  std::string CdiId(const PreparedDevice& device) const {
    return std::string(kCdiKind) + "=" + CdiName(device);
  }
};

struct PrepareContext {
  const topology::NodeShape* shape = nullptr;
  std::string node_name;  // the pool of this node's devices
  deviceplugin::CoreNumbering numbering = deviceplugin::CoreNumbering::kContainer;
};

// The claim prepared for this node. `expected_uid` is the uid kubelet named: a claim read back
// with another uid was deleted and re-created under the same name, and is refused.
Result<PreparedClaim> PlanClaim(const PrepareContext& context, const ResourceClaimView& claim,
                                std::string_view expected_uid);

// The claim's envs for its devices at the node's LNC (or at `lnc` for whole devices), numbered as
// `numbering` says. Also used to rebuild a claim read back from its CDI spec.
Result<std::map<std::string, std::string>> ClaimEnv(const PrepareContext& context,
                                                    const std::vector<PreparedDevice>& devices,
                                                    int lnc, int ultraserver_mode);

// The units the claim holds (admin-access devices hold none), added to `usage`. Units another
// claim already holds are left as they are.
void AddClaimUnits(const topology::NodeShape& shape, const PreparedClaim& claim,
                   topology::NodeUsage& usage);

// The claim as one request of the demand model: whole devices by count, or cores by count when
// every device is a core range.
topology::Request RequestOf(const topology::NodeShape& shape, const PreparedClaim& claim);

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_PREPARE_H_
