#include "draplugin/prepare.h"

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "claims/gang.h"
#include "claims/keys.h"
#include "draplugin/opaque_config.h"
#include "nodeagent/pod_resources.h"
#include "topology/id_ranges.h"

namespace toposched::draplugin {
namespace {

using topology::NodeShape;

// Does a config for `requests` apply to the result of `request` ("req" or "req/sub")? A config
// for a request covers its firstAvailable subrequests too.
bool Applies(const std::vector<std::string>& requests, std::string_view request) {
  if (requests.empty()) return true;
  const std::string_view parent = request.substr(0, request.find('/'));
  return std::any_of(requests.begin(), requests.end(),
                     [&](const std::string& r) { return r == request || r == parent; });
}

std::string Where(const ClaimConfig& config, size_t index, bool from_status) {
  return fmt::format(
      "{}[{}]{}", from_status ? "status.allocation.devices.config" : "spec.devices.config", index,
      config.source == ClaimConfig::Source::kClass ? " (from the DeviceClass)" : "");
}

struct DecodedConfig {
  std::vector<std::string> requests;
  OpaqueConfig config;
  std::string where;
};

// This driver's opaque configs, weakest first: the class's, then the claim's (a later one that
// applies to a device overrides an earlier one).
Result<std::vector<DecodedConfig>> DecodeConfigs(const ResourceClaimView& claim) {
  std::vector<DecodedConfig> out;
  auto add = [&](const ClaimConfig& config, size_t index, bool from_status) -> Status {
    if (config.driver != dra::kDriverName) return OkStatus();
    const std::string where = Where(config, index, from_status);
    if (config.parameters.empty())
      return Error{fmt::format("{}: opaque.parameters missing", where)};
    auto decoded = DecodeOpaqueConfig(config.parameters);
    if (!decoded.ok()) return Error{fmt::format("{}: opaque.{}", where, decoded.error())};
    out.push_back({config.requests, *decoded, where});
    return OkStatus();
  };
  for (bool classes : {true, false}) {
    for (size_t i = 0; i < claim.status_configs.size(); ++i) {
      const ClaimConfig& config = claim.status_configs[i];
      if ((config.source == ClaimConfig::Source::kClass) != classes) continue;
      TOPOSCHED_RETURN_IF_ERROR(add(config, i, true));
    }
  }
  // The claim's own configs, as the status copies them; read from the spec too so that a claim
  // allocated by a scheduler that copied none is still configured.
  for (size_t i = 0; i < claim.spec_configs.size(); ++i) {
    TOPOSCHED_RETURN_IF_ERROR(add(claim.spec_configs[i], i, false));
  }
  return out;
}

}  // namespace

PhysicalUnits PhysicalUnits::CommonWith(const PhysicalUnits& other) const {
  PhysicalUnits common;
  common.cores = cores & other.cores;
  common.devices = devices & other.devices;
  return common;
}

PhysicalUnits WholeDevices(const topology::InstanceType& type, topology::DeviceMask devices) {
  PhysicalUnits units;
  const int per_device = type.physical_cores_per_device();
  for (int d : topology::MaskToIds(devices)) {
    if (d >= type.devices) continue;
    units.devices |= topology::DeviceMask{1} << d;
    for (int k = 0; k < per_device; ++k) units.cores.set(static_cast<size_t>(d * per_device + k));
  }
  return units;
}

PhysicalUnits PhysicalUnitsOf(const NodeShape& shape, const dra::Offer& offer) {
  if (offer.kind != dra::OfferKind::kCores)
    return WholeDevices(*shape.type, offer.placement.devices);
  // Node-wide logical core c = d * cores_per_device + k sits on physical cores c*L..c*L+L-1,
  // since a device's physical cores are cores_per_device * L.
  const int lnc = NamesLnc(shape);
  PhysicalUnits units;
  units.devices = offer.placement.devices;
  for (int core : offer.placement.ids) {
    for (int p = core * lnc; p < (core + 1) * lnc; ++p) units.cores.set(static_cast<size_t>(p));
  }
  return units;
}

std::string DescribeUnits(const topology::InstanceType& type, const PhysicalUnits& units) {
  const int per_device = type.physical_cores_per_device();
  std::vector<std::string> parts;
  for (int d : topology::MaskToIds(units.devices)) {
    std::vector<int> cores;
    for (int k = 0; k < per_device; ++k) {
      if (units.cores.test(static_cast<size_t>(d * per_device + k))) cores.push_back(k);
    }
    parts.push_back(fmt::format("{} of /dev/neuron{}", topology::FormatIdRanges(cores), d));
  }
  if (parts.empty()) return "nothing";
  return fmt::format("physical cores {}", fmt::join(parts, ", "));
}

std::string PreparedClaim::Who() const {
  if (name.empty()) return fmt::format("uid {} (its CDI spec could not be read)", uid);
  return fmt::format("{}/{} (uid {})", ns, name, uid);
}

void SetHeldFromDevices(PreparedClaim& claim) {
  claim.held = {};
  for (const PreparedDevice& device : claim.devices) {
    if (!device.admin_access) claim.held.Add(device.units);
  }
}

std::string OverlapWithPrepared(const topology::InstanceType& type, const PreparedClaim& claim,
                                const std::map<std::string, PreparedClaim>& prepared) {
  for (const auto& [uid, other] : prepared) {
    if (uid == claim.uid || !claim.held.Meets(other.held)) continue;
    // Name the device of ours that meets it (the claim-wide union when none alone does).
    std::string mine = "its devices";
    for (const PreparedDevice& device : claim.devices) {
      if (!device.admin_access && device.units.Meets(other.held)) {
        mine = device.device;
        break;
      }
    }
    return fmt::format(
        "{} would hold {}, which claim {} prepared on this node holds already ({}); refused: "
        "two claims never share a core (the allocation disagrees with what this node has "
        "prepared; the other claim must be unprepared first){}",
        mine, DescribeUnits(type, claim.held.CommonWith(other.held)), other.Who(),
        DescribeUnits(type, other.held),
        other.held_because.empty() ? "" : fmt::format(" [held because {}]", other.held_because));
  }
  return {};
}

namespace {

std::string DeviceNames(const std::vector<PreparedDevice>& devices) {
  std::vector<std::string_view> names;
  names.reserve(devices.size());
  for (const PreparedDevice& d : devices) names.push_back(d.device);
  return fmt::format("{}", fmt::join(names, ","));
}

// Why the claim's devices, which its containers all see together (ClaimEnv), are not one legal
// set; empty when they are. Core ranges are checked as cores, whole devices and sets as devices.
// A claim only of admin-access devices (monitoring beside other claims) is not checked.
std::string IllegalUnion(const NodeShape& shape, const std::vector<PreparedDevice>& devices) {
  if (std::all_of(devices.begin(), devices.end(),
                  [](const PreparedDevice& d) { return d.admin_access; })) {
    return "";
  }
  const bool any_cores = std::any_of(devices.begin(), devices.end(), [](const PreparedDevice& d) {
    return d.offer.kind == dra::OfferKind::kCores;
  });
  std::vector<int> ids;
  for (const PreparedDevice& d : devices) {
    const std::vector<int> units =
        any_cores ? dra::CoresOfOffer(shape, d.offer) : d.offer.placement.ids;
    ids.insert(ids.end(), units.begin(), units.end());
  }
  return topology::CheckLegalSet(shape, any_cores ? topology::Unit::kCore : topology::Unit::kDevice,
                                 std::move(ids));
}

}  // namespace

Result<std::map<std::string, std::string>> ClaimEnv(const PrepareContext& context,
                                                    const std::vector<PreparedDevice>& devices,
                                                    int lnc, int ultraserver_mode) {
  const NodeShape& shape = *context.shape;
  const int node_lnc = shape.lnc == 0 ? 1 : shape.lnc;
  nodeagent::ContainerSetup setup;
  if (lnc != 0 && lnc != node_lnc) {
    // Whole devices can run at another LNC than the node's; a core range is a range of the
    // node's logical cores and cannot.
    for (const PreparedDevice& device : devices) {
      if (device.offer.kind == dra::OfferKind::kCores) {
        return Error{
            fmt::format("logicalNeuronCore {} cannot apply to {}: its cores are the "
                        "node's logical cores at LNC {}",
                        lnc, device.device, node_lnc)};
      }
    }
    auto other = NodeShape::Make(*shape.type, lnc);
    if (!other.ok()) return Error{fmt::format("logicalNeuronCore {}: {}", lnc, other.error())};
    std::set<int> ids;
    for (const PreparedDevice& device : devices) {
      ids.insert(device.offer.placement.ids.begin(), device.offer.placement.ids.end());
    }
    setup =
        nodeagent::BuildContainerSetup(*other, topology::Unit::kDevice,
                                       std::vector<int>(ids.begin(), ids.end()), context.numbering);
    setup.envs[std::string(claims::kEnvLogicalNcConfig)] = std::to_string(lnc);
  } else {
    std::set<int> cores;
    for (const PreparedDevice& device : devices) {
      for (int core : dra::CoresOfOffer(shape, device.offer)) cores.insert(core);
    }
    setup = nodeagent::BuildContainerSetup(shape, topology::Unit::kCore,
                                           std::vector<int>(cores.begin(), cores.end()),
                                           context.numbering);
  }
  if (ultraserver_mode != 0) {
    setup.envs["NEURON_RT_ULTRASERVER_MODE"] =
        std::to_string(claims::UltraServerModeFor(ultraserver_mode));
  }
  return setup.envs;
}

Result<PreparedClaim> PlanClaim(const PrepareContext& context, const ResourceClaimView& claim,
                                std::string_view expected_uid) {
  const std::string who = fmt::format("ResourceClaim {}/{}", claim.ns, claim.name);
  if (claim.uid != expected_uid) {
    return Error{
        fmt::format("{} has uid {}, kubelet asked for {} (the claim was deleted and "
                    "created again under the same name)",
                    who, claim.uid, expected_uid)};
  }
  if (!claim.allocated)
    return Error{fmt::format("{} is not allocated (no status.allocation)", who)};
  TOPOSCHED_ASSIGN_OR_RETURN(const std::vector<DecodedConfig> configs, DecodeConfigs(claim));

  PreparedClaim prepared;
  prepared.uid = claim.uid;
  prepared.ns = claim.ns;
  prepared.name = claim.name;
  std::set<std::string> other_pools;
  std::optional<int> lnc;
  std::optional<int> mode;
  std::string lnc_from;
  std::string mode_from;
  for (const AllocatedDevice& result : claim.results) {
    if (result.driver != dra::kDriverName) continue;
    if (result.pool != context.node_name) {
      other_pools.insert(result.pool);
      continue;
    }
    // One DRA device may serve several requests of the claim (kubelet wants them all named).
    auto same = std::find_if(prepared.devices.begin(), prepared.devices.end(),
                             [&](const PreparedDevice& d) { return d.device == result.device; });
    if (same != prepared.devices.end()) {
      same->requests.push_back(result.request);
      same->admin_access = same->admin_access && result.admin_access;
      continue;
    }
    auto offer = dra::OfferFromName(*context.shape, result.device);
    if (!offer.ok()) {
      return Error{fmt::format("{} request {}: {}", who, result.request, offer.error())};
    }
    PreparedDevice device;
    device.device = result.device;
    device.pool = result.pool;
    device.requests = {result.request};
    device.admin_access = result.admin_access;
    device.offer = std::move(offer).value();
    for (int d : topology::MaskToIds(device.offer.placement.devices)) {
      device.device_nodes.push_back(fmt::format("/dev/neuron{}", d));
    }
    prepared.devices.push_back(std::move(device));

    // The configs that apply to this result: the last of each kind wins.
    std::optional<int> result_lnc;
    std::optional<int> result_mode;
    std::string result_lnc_from;
    std::string result_mode_from;
    for (const DecodedConfig& config : configs) {
      if (!Applies(config.requests, result.request)) continue;
      if (config.config.kind == OpaqueConfig::Kind::kNeuronConfig) {
        result_lnc = config.config.logical_neuron_core;
        result_lnc_from = config.where;
      } else {
        result_mode = config.config.ultraserver_mode;
        result_mode_from = config.where;
      }
    }
    // The env is the claim's (every container that uses it gets it), so its devices must agree.
    if (result_lnc) {
      if (lnc && *lnc != *result_lnc) {
        return Error{
            fmt::format("{}: logicalNeuronCore {} ({}) and {} ({}) apply to devices of "
                        "the same claim; its containers get one setting",
                        who, *lnc, lnc_from, *result_lnc, result_lnc_from)};
      }
      lnc = result_lnc;
      lnc_from = result_lnc_from;
    }
    if (result_mode) {
      if (mode && *mode != *result_mode) {
        return Error{
            fmt::format("{}: ultraserverMode {} ({}) and {} ({}) apply to devices of the "
                        "same claim; its containers get one setting",
                        who, *mode, mode_from, *result_mode, result_mode_from)};
      }
      mode = result_mode;
      mode_from = result_mode_from;
    }
  }
  if (prepared.devices.empty()) {
    if (!other_pools.empty()) {
      return Error{fmt::format("{} has devices of {} in pool {}, none on this node ({})", who,
                               dra::kDriverName, fmt::join(other_pools, ", "), context.node_name)};
    }
    return Error{fmt::format("{} has no device of driver {} allocated", who, dra::kDriverName)};
  }
  if (mode && *mode > 1) {
    // A multi-node UltraServer job also needs its server and node ids, which come with AWS's
    // neuron_node devices; we publish none. A pod started without them would run as if alone.
    return Error{fmt::format(
        "{}: ultraserverMode {} ({}) needs AWS's neuron_node devices (the UltraServer's server "
        "and node ids), which toposched dra-plugin does not publish; run multi-node UltraServer "
        "jobs as gangs through the toposched extender (docs/ultraserver.md)",
        who, *mode, mode_from)};
  }
  if (std::string illegal = IllegalUnion(*context.shape, prepared.devices); !illegal.empty()) {
    // The allocator picks any devices a request's class and selectors allow (a KEP-5004 claim
    // for `aws.amazon.com/neuron: N`, or N whole devices without AWS's matchAttribute): the
    // Neuron runtime cannot use a set that is not connected, so it is never prepared.
    return Error{
        fmt::format("{}: its devices {} together: {}; ask for one set (class "
                    "neurondevices.toposched.io, or AWS's matchAttribute on Trainium; docs/dra.md)",
                    who, DeviceNames(prepared.devices), illegal)};
  }
  auto env = ClaimEnv(context, prepared.devices, lnc.value_or(0), mode.value_or(0));
  if (!env.ok()) return Error{fmt::format("{}: {}", who, env.error())};
  prepared.env = std::move(env).value();
  // After the loop: a device named by several results has admin access only if all say so.
  for (PreparedDevice& device : prepared.devices) {
    if (!device.admin_access) device.units = PhysicalUnitsOf(*context.shape, device.offer);
  }
  prepared.lnc = NamesLnc(*context.shape);
  prepared.instance_type = context.shape->type->name;
  SetHeldFromDevices(prepared);
  return prepared;
}

void AddClaimUnits(const NodeShape& shape, const PreparedClaim& claim, topology::NodeUsage& usage) {
  const int lnc = NamesLnc(shape);
  // Only the node's physical cores (a core past them is not this node's), each logical core once.
  std::vector<int> cores;
  const size_t physical = std::min(claim.held.cores.size(), static_cast<size_t>(shape.cores) * lnc);
  // Only the set bits (libstdc++'s _Find_first/_Find_next): a claim holds a few of 512.
  for (size_t p = claim.held.cores._Find_first(); p < physical;
       p = claim.held.cores._Find_next(p)) {
    const int core = static_cast<int>(p) / lnc;
    if (cores.empty() || cores.back() != core) cores.push_back(core);
  }
  // Every publish adds every prepared claim, so the usual case (nothing shared) is one Take.
  if (usage.Take(shape, topology::Unit::kCore, cores)) return;
  // One id at a time: a core two claims hold (admin access aside) is counted once.
  for (int core : cores) {
    if (usage.AllFree(shape, topology::Unit::kCore, {core}))
      usage.Take(shape, topology::Unit::kCore, {core});
  }
}

std::optional<std::string> ClaimsHeldValue(const std::map<std::string, PreparedClaim>& prepared,
                                           const PreparedClaim* adding) {
  topology::DeviceMask devices = adding != nullptr ? adding->held.devices : 0;
  for (const auto& [uid, claim] : prepared) devices |= claim.held.devices;
  return nodeagent::DraClaimsHeldValue(devices);
}

topology::Request RequestOf(const NodeShape& shape, const PreparedClaim& claim) {
  const bool cores_only =
      std::all_of(claim.devices.begin(), claim.devices.end(),
                  [](const PreparedDevice& d) { return d.offer.kind == dra::OfferKind::kCores; });
  topology::Request request;
  if (cores_only) {
    request.unit = topology::Unit::kCore;
    for (const PreparedDevice& d : claim.devices) {
      request.count += static_cast<int>(dra::CoresOfOffer(shape, d.offer).size());
    }
  } else {
    request.unit = topology::Unit::kDevice;
    topology::DeviceMask devices = 0;
    for (const PreparedDevice& d : claim.devices) devices |= d.offer.placement.devices;
    request.count = static_cast<int>(topology::MaskToIds(devices).size());
  }
  return request;
}

}  // namespace toposched::draplugin
