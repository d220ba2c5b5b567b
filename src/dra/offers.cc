#include "dra/offers.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

namespace toposched::dra {
namespace {

using topology::DeviceMask;
using topology::NodeShape;
using topology::NodeUsage;
using topology::Placement;
using topology::Request;
using topology::Unit;

std::string NameOf(OfferKind kind, const std::vector<int>& ids) {
  switch (kind) {
    case OfferKind::kDevice:
      return fmt::format("neurondevice{}", ids.front());
    case OfferKind::kDeviceSet:
      return fmt::format("neurondevices-{}-{}", ids.front(), ids.back());
    case OfferKind::kCores:
      return fmt::format("neuroncores-{}-{}", ids.front(), ids.back());
  }
  return {};
}

Offer MakeOffer(OfferKind kind, Placement placement) {
  Offer offer;
  offer.name = NameOf(kind, placement.ids);
  offer.kind = kind;
  offer.placement = std::move(placement);
  return offer;
}

}  // namespace

std::string GroupAttribute(int size) {
  return fmt::format("{}/devicegroup{}_id", kAwsGroupDomain, size);
}

std::string_view ResourceTypeOf(OfferKind kind) {
  switch (kind) {
    case OfferKind::kDevice:
      return "neuron_device";
    case OfferKind::kDeviceSet:
      return "neuron_device_set";
    case OfferKind::kCores:
      return "neuron_cores";
  }
  return "";
}

Result<SetOffers> ParseSetOffers(std::string_view text) {
  if (text == "auto") return SetOffers::kAuto;
  if (text == "on") return SetOffers::kOn;
  if (text == "off") return SetOffers::kOff;
  return Error{fmt::format("--set-offers '{}': expected auto, on or off", text)};
}

OfferScope ScopeFor(const NodeShape& shape, SetOffers sets, bool core_offers) {
  if (core_offers) return OfferScope::kDeviceSetsAndCores;
  switch (sets) {
    case SetOffers::kOn:
      return OfferScope::kDeviceSets;
    case SetOffers::kOff:
      return OfferScope::kWholeDevices;
    case SetOffers::kAuto:
      break;
  }
  return shape.type->rule == topology::LegalSetRule::kAligned ? OfferScope::kWholeDevices
                                                              : OfferScope::kDeviceSets;
}

bool ScopeHas(OfferScope scope, OfferKind kind) {
  switch (kind) {
    case OfferKind::kDevice:
      return true;
    case OfferKind::kDeviceSet:
      return scope != OfferScope::kWholeDevices;
    case OfferKind::kCores:
      return scope == OfferScope::kDeviceSetsAndCores;
  }
  return true;
}

std::vector<Offer> LegalOffers(const NodeShape& shape, OfferScope scope, DeviceMask unhealthy) {
  std::vector<Offer> out;
  const NodeUsage empty;
  auto healthy = [&](const Placement& p) { return (p.devices & unhealthy) == 0; };
  for (int d = 0; d < shape.devices; ++d) {
    Placement p = Placement::FromIds(shape, Unit::kDevice, {d});
    if (healthy(p)) out.push_back(MakeOffer(OfferKind::kDevice, std::move(p)));
  }
  if (scope == OfferScope::kWholeDevices) return out;
  // Sets by size, then by first id: a claim for N devices scans only the sets of N.
  for (int n = 2; n <= shape.devices; ++n) {
    const Request request{Unit::kDevice, n};
    if (!topology::CanEverGrant(shape, request)) continue;
    // Rule `any` (all-to-all fabrics) makes every subset legal: those are claimed as N whole
    // devices, not as sets, which would be 2^devices offers.
    if (shape.type->rule == topology::LegalSetRule::kAny && n != shape.devices) continue;
    for (Placement& p : topology::LegalPlacements(shape, empty, request)) {
      if (healthy(p)) out.push_back(MakeOffer(OfferKind::kDeviceSet, std::move(p)));
    }
  }
  if (scope != OfferScope::kDeviceSetsAndCores) return out;
  // Core ranges inside one device; a range over several devices is claimed as a device set.
  for (int n = 1; n <= shape.cores_per_device; ++n) {
    const Request request{Unit::kCore, n};
    if (!topology::CanEverGrant(shape, request)) continue;
    for (Placement& p : topology::LegalPlacements(shape, empty, request)) {
      if (std::popcount(p.devices) != 1 || !healthy(p)) continue;
      out.push_back(MakeOffer(OfferKind::kCores, std::move(p)));
    }
  }
  return out;
}

Result<Offer> OfferFromName(const NodeShape& shape, std::string_view name) {
  // Cheap shape check first, so a hostile name costs no enumeration.
  constexpr std::string_view kPrefixes[] = {"neurondevices-", "neuroncores-", "neurondevice"};
  const bool known = std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                                 [&](std::string_view p) { return name.starts_with(p); });
  if (!known || name.size() > 63) {
    return Error{
        fmt::format("DRA device '{}' is not one of this driver's names (neurondeviceN, "
                    "neurondevices-A-B, neuroncores-A-B)",
                    name)};
  }
  for (Offer& offer : LegalOffers(shape, OfferScope::kDeviceSetsAndCores)) {
    if (offer.name == name) return std::move(offer);
  }
  return Error{
      fmt::format("DRA device '{}' is not a legal choice on this {} node ({} devices, "
                  "{} cores per device)",
                  name, shape.type->name, shape.devices, shape.cores_per_device)};
}

std::vector<int> CoresOfOffer(const NodeShape& shape, const Offer& offer) {
  if (offer.kind == OfferKind::kCores) return offer.placement.ids;
  std::vector<int> cores;
  for (int d : offer.placement.ids) {
    for (int k = 0; k < shape.cores_per_device; ++k)
      cores.push_back(d * shape.cores_per_device + k);
  }
  return cores;
}

}  // namespace toposched::dra
