// What one node offers through Dynamic Resource Allocation: every legal choice of the topology
// engine as one DRA device, so that the scheduler's DRA allocator — which counts and matches but
// knows no topology — can only ever hand out a legal set. Pure: no I/O, no clock.
//
// Three kinds of offer, each a DRA device in the node's pool (docs/dra.md):
//   * `neurondeviceN` — one whole device, as AWS's Neuron DRA driver names it (its claims work
//     unchanged: DeviceClass `neuron.aws.com`, ExactCount N, matchAttribute on the group ids);
//   * `neurondevices-A-B` — one legal multi-device set (consecutive ids on an Inferentia ring,
//     an aligned row group on the Trainium torus), claimed as ONE device of class
//     `neurondevices.toposched.io`;
//   * `neuroncores-A-B` — a NeuronCore range inside one device (node-wide core ids at the
//     node's LNC), claimed as one device of class `neuroncores.toposched.io`.
// Sets and core ranges overlap the whole devices they cover; shared counters (offers_counters in
// slices.h) make overlapping offers mutually exclusive, so they are offered only where the
// cluster has partitionable devices (resource.k8s.io shared counters, 1.35+ with the gate, on by
// default from 1.36). Without them only whole devices are offered.
#ifndef TOPOSCHED_DRA_OFFERS_H_
#define TOPOSCHED_DRA_OFFERS_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "topology/allocator.h"

namespace toposched::dra {

// AWS's driver name: claims, DeviceClasses and CEL selectors written for AWS's driver name it.
inline constexpr std::string_view kDriverName = "neuron.aws.com";
// The DeviceClasses a claim names (the chart installs them; docs/dra.md): AWS's whole devices
// (the driver's name), our sets of devices, our core ranges.
inline constexpr std::string_view kWholeDeviceClass = kDriverName;
inline constexpr std::string_view kDeviceSetClass = "neurondevices.toposched.io";
inline constexpr std::string_view kCoreRangeClass = "neuroncores.toposched.io";
// The attribute domains: ours (deviceCount, coreCount, lnc) and AWS's group ids.
inline constexpr std::string_view kOurAttributeDomain = "toposched.io";
inline constexpr std::string_view kAwsGroupDomain = "resource.aws.com";
// `resource.aws.com/devicegroupN_id`: the same value on every whole device of one aligned group
// of N (Trainium), which a claim for N devices matches on.
std::string GroupAttribute(int size);

enum class OfferKind { kDevice, kDeviceSet, kCores };

// The `resourceType` attribute of each kind: AWS's `neuron_device` for whole devices; ours for
// the others (AWS's driver has no such devices).
std::string_view ResourceTypeOf(OfferKind kind);

struct Offer {
  std::string name;  // a DNS label, unique in the node's pool
  OfferKind kind = OfferKind::kDevice;
  // Device ids (kDevice, kDeviceSet) or node-wide core ids (kCores), ascending, with the
  // devices they touch.
  topology::Placement placement;
  bool operator==(const Offer& other) const {
    return name == other.name && kind == other.kind && placement.ids == other.placement.ids;
  }
};

// Which offers a node makes. Sets and core ranges need shared counters (partitionable devices);
// core ranges are the costliest for kube-scheduler's allocator (160 of a trn2.48xlarge's 183
// offers at LNC 2, each converted, validated and matched per pod per node), so a node offers them
// only when asked (`toposched dra-plugin --core-offers`; docs/dra.md, "What the allocator pays").
enum class OfferScope { kWholeDevices, kDeviceSets, kDeviceSetsAndCores };

// Whether a node offers its legal multi-device sets as devices of their own, which needs shared
// counters. kAuto: not on an aligned type (Trainium), whose whole devices carry AWS's group
// attributes (`resource.aws.com/devicegroupN_id`, one value per aligned group of N): a claim's
// `matchAttribute` on them gets exactly one legal set, so set offers would add nothing a claim
// cannot say and cost kube-scheduler's allocator 1.4-1.6x per pod (docs/dra.md, "What the allocator
// pays for"); on the other types (an Inferentia ring) no attribute says "consecutive", so yes.
enum class SetOffers { kAuto, kOn, kOff };
Result<SetOffers> ParseSetOffers(std::string_view text);  // auto|on|off

// The offers of a node of `shape` where the cluster has partitionable devices. Core ranges need
// the counters that sets use, so `core_offers` brings the sets with it.
OfferScope ScopeFor(const topology::NodeShape& shape, SetOffers sets, bool core_offers);
// Whether offers of `kind` are among those of `scope`.
bool ScopeHas(OfferScope scope, OfferKind kind);

// Every legal choice on a node of `shape` within `scope`, in index order: each whole device; from
// kDeviceSets, also every legal set of 2..all devices; with kDeviceSetsAndCores, also every legal
// core range that lies inside one device. Offers touching a device of `unhealthy` are left out.
std::vector<Offer> LegalOffers(const topology::NodeShape& shape, OfferScope scope,
                               topology::DeviceMask unhealthy = 0);

// The offer a DRA device name stands for on this node (what NodePrepareResources is told was
// allocated). Errors, quoting the name, when it is malformed, outside the node or not a legal
// choice here.
Result<Offer> OfferFromName(const topology::NodeShape& shape, std::string_view name);

// The cores an offer gives the container, node-wide, at the node's LNC.
std::vector<int> CoresOfOffer(const topology::NodeShape& shape, const Offer& offer);

}  // namespace toposched::dra

#endif  // TOPOSCHED_DRA_OFFERS_H_
