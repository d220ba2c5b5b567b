// What NodePrepareResources makes of one allocated ResourceClaim, as a pure function of the
// node's shape and the claim: which of its devices are this node's, what each is (dra::Offer),
// the opaque configs that apply, and what the claim's containers get (device nodes per device,
// NEURON_RT_VISIBLE_CORES and friends for the claim). Every reason a claim cannot be prepared is
// an error that says what is wrong with which part of the claim.
#ifndef TOPOSCHED_DRAPLUGIN_PREPARE_H_
#define TOPOSCHED_DRAPLUGIN_PREPARE_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "dra/offers.h"
#include "draplugin/resource_claim.h"
#include "nodeagent/container_setup.h"
#include "topology/allocator.h"

namespace toposched::draplugin {

// CDI kind of the devices this driver prepares.
inline constexpr std::string_view kCdiKind = "neuron.aws.com/device";

// What a prepared claim holds, whatever names it was prepared under: device nodes and physical
// NeuronCores, numbered node-wide (device * physical cores per device + k). Names mean other
// cores at another LNC; these do not. Two claims meet when they share a physical core (two core
// ranges of one device share its device node and are still apart).
struct PhysicalUnits {
  topology::DeviceMask devices = 0;
  topology::CoreBits cores;
  bool Meets(const PhysicalUnits& other) const { return (cores & other.cores).any(); }
  bool empty() const { return devices == 0; }
  void Add(const PhysicalUnits& other) {
    devices |= other.devices;
    cores |= other.cores;
  }
  PhysicalUnits CommonWith(const PhysicalUnits& other) const;
  bool operator==(const PhysicalUnits&) const = default;
};

// The one home of the name-to-hardware mapping: an offer named at `shape`'s LNC L holds every
// physical core of its devices (whole devices and sets), or physical cores c*L..c*L+L-1 of each
// logical core c (core ranges).
PhysicalUnits PhysicalUnitsOf(const topology::NodeShape& shape, const dra::Offer& offer);
// Every physical core of `devices`: what a claim holds when only its device nodes are known.
PhysicalUnits WholeDevices(const topology::InstanceType& type, topology::DeviceMask devices);
// "physical cores 0-3 of /dev/neuron2, 0-7 of /dev/neuron3".
std::string DescribeUnits(const topology::InstanceType& type, const PhysicalUnits& units);
// The node's LNC as names are read at it (1 on types without an LNC setting).
inline int NamesLnc(const topology::NodeShape& shape) { return shape.lnc == 0 ? 1 : shape.lnc; }

struct PreparedDevice {
  std::string device;  // the DRA device name (dra/offers.h)
  std::string pool;
  std::vector<std::string> requests;  // the claim's requests it was allocated for
  bool admin_access = false;          // monitoring access: it holds nothing
  dra::Offer offer;
  std::vector<std::string> device_nodes;  // "/dev/neuronN", the same path in the container
  PhysicalUnits units;                    // what it holds (none with admin access)
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
  // The LNC its device names were read at: the node's when it was prepared (its CDI spec records
  // it, so a restart at another LNC does not read the names again under the new one).
  int lnc = 1;
  std::string instance_type;  // the node's type when it was prepared
  // Every unit its devices hold. A claim whose spec could not be read by name holds whole
  // devices (those its spec lists, or the whole node), and `held_because` says why.
  PhysicalUnits held;
  std::string held_because;
  bool operator==(const PreparedClaim&) const = default;

  // "default/train (uid 1234)", or the spec's uid alone when its name could not be read.
  std::string Who() const;

  std::string CdiName(const PreparedDevice& device) const { return uid + "-" + device.device; }
  std::string CdiId(const PreparedDevice& device) const {
    return std::string(kCdiKind) + "=" + CdiName(device);
  }
};

struct PrepareContext {
  const topology::NodeShape* shape = nullptr;
  std::string node_name;  // the pool of this node's devices
  nodeagent::CoreNumbering numbering = nodeagent::CoreNumbering::kContainer;
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

// The claim's `held` units from its devices' (admin-access devices hold none).
void SetHeldFromDevices(PreparedClaim& claim);

// Why `claim` cannot be prepared beside the `prepared` ones (by uid; its own uid is skipped, so
// preparing it again is no overlap): the first that holds a physical core it would hold, named,
// with the units they share. Empty when none does.
std::string OverlapWithPrepared(const topology::InstanceType& type, const PreparedClaim& claim,
                                const std::map<std::string, PreparedClaim>& prepared);

// The units the claim holds (claim.held, at whatever LNC it was prepared), added to `usage` at
// `shape`'s LNC: a logical core is in use when any of its physical cores is held. Units another
// claim already holds are left as they are.
void AddClaimUnits(const topology::NodeShape& shape, const PreparedClaim& claim,
                   topology::NodeUsage& usage);

// The value of the node's claims::kLabelDraClaimsHeld while `prepared` (and `adding`, when not
// null) hold devices: how many devices they hold; nullopt when none does (the label is removed).
std::optional<std::string> ClaimsHeldValue(const std::map<std::string, PreparedClaim>& prepared,
                                           const PreparedClaim* adding = nullptr);

// The claim as one request of the demand model: whole devices by count, or cores by count when
// every device is a core range.
topology::Request RequestOf(const topology::NodeShape& shape, const PreparedClaim& claim);

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_PREPARE_H_
