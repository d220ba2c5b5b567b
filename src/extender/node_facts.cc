#include "extender/node_facts.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/text.h"
#include "claims/keys.h"
#include "topology/id_ranges.h"

namespace toposched::extender {
namespace {

// The LNC a Trn2 node runs at, only on positive evidence (issue 18): an LNC read wrongly turns
// core ids into the wrong devices, so a device pod and a core pod can overlap physically.
//   1. the label our device plugin sets from the driver's config (claims::kLabelNeuronLnc);
//   2. else the allocatable the device plugin advertises, only when it is unambiguous: the
//      node's full core count at exactly one allowed LNC, and its full device count where devices
//      are advertised too (0 after a kubelet restart, or 120 with one device unhealthy, say
//      nothing: 64 cores are a whole LNC 2 node or half an LNC 1 node);
//   3. else the last value known for the node (`last_known`, 0 when none);
//   4. else, never seen with evidence, the type's default (the driver's default).
struct Lnc {
  int value = 0;
  const char* source = "";
};

Lnc LncOf(const topology::InstanceType& type, const kube::Node& node, const ResourceNames& names,
          int last_known) {
  if (!type.has_lnc) return {};
  auto allowed = [&](int lnc) {
    return std::find(type.lnc.allowed.begin(), type.lnc.allowed.end(), lnc) !=
           type.lnc.allowed.end();
  };
  if (auto label = node.labels.find(claims::kLabelNeuronLnc); label != node.labels.end()) {
    const std::string& text = label->second;
    if (const std::optional<int64_t> lnc = ParseDecimal(text, 0, 64);
        lnc && allowed(static_cast<int>(*lnc))) {
      return {static_cast<int>(*lnc), "label"};
    }
    spdlog::warn("node {}: label {}={} is not an LNC {} allows ({}); ignoring it", node.name,
                 claims::kLabelNeuronLnc, text, type.name, fmt::join(type.lnc.allowed, ", "));
  }
  bool devices_whole = true;  // no device count advertised, or the type's whole count
  for (const auto& resource : names.device) {
    auto it = node.allocatable.find(resource);
    if (it != node.allocatable.end() && it->second != type.devices) devices_whole = false;
  }
  if (devices_whole) {
    for (const auto& resource : names.core) {
      auto it = node.allocatable.find(resource);
      if (it == node.allocatable.end()) continue;
      int matched = 0;
      int found = 0;
      for (int lnc : type.lnc.allowed) {
        if (it->second == int64_t{type.devices} * (type.lnc.physical_cores_per_device / lnc)) {
          ++matched;
          found = lnc;
        }
      }
      if (matched == 1) return {found, "allocatable"};
    }
  }
  if (last_known != 0) return {last_known, "last known"};
  return {type.lnc.default_lnc, "default"};
}

// The devices the node agent reports out of service. An annotation that cannot be read keeps
// what was known before (dropping it would offer dead devices again).
void ReadOutOfService(const kube::Node& node, const topology::InstanceType& type,
                      const NodeFacts* previous, NodeFacts& facts) {
  const auto ids = node.annotations.find(claims::kAnnotationUnhealthyDevices);
  if (ids == node.annotations.end()) return;
  if (const auto why = node.annotations.find(claims::kAnnotationUnhealthyWhy);
      why != node.annotations.end()) {
    facts.out_of_service_why = why->second;
  }
  auto parsed = topology::ParseIdRanges(ids->second, type.devices);
  if (!parsed.ok()) {
    if (previous != nullptr) facts.out_of_service = previous->out_of_service;
    spdlog::warn(
        "node {}: annotation {}=\"{}\" is not a list of {}'s device ids ({}); keeping "
        "the devices out of service known before: {}",
        node.name, claims::kAnnotationUnhealthyDevices, ids->second, type.name, parsed.error(),
        topology::FormatIdRanges(topology::MaskToIds(facts.out_of_service)));
    return;
  }
  for (int id : *parsed) facts.out_of_service |= topology::DeviceMask{1} << id;
}

}  // namespace

std::vector<tracker::NodeGroup> NodeFacts::Groups() const {
  std::vector<tracker::NodeGroup> groups;
  if (!ultraserver) return groups;
  for (int nodes : {2, 4}) {
    if (ultraserver->Supports(nodes)) {
      groups.push_back({nodes, ultraserver->GroupId(nodes), ultraserver->NodeId(nodes)});
    }
  }
  return groups;
}

bool HasFacts(const kube::Node& node) {
  return !node.resource_version.empty() || !node.labels.empty() || !node.allocatable.empty();
}

NodeFacts FactsOf(const kube::Node& node, const topology::Catalog& catalog,
                  const topology::PoolSet* pools, const ResourceNames& resources,
                  const NodeFacts* previous) {
  NodeFacts facts;
  facts.instance_type = node.instance_type;
  if (auto place = claims::UltraServerPlaceOf(node.labels); place.ok()) {
    facts.ultraserver = std::move(place).value();
  } else {
    spdlog::warn("node {}: {}; it takes no multi-node gang until its labels are fixed", node.name,
                 place.error());
  }
  if (auto label = node.labels.find(claims::kPoolLabel); label != node.labels.end()) {
    facts.pool = label->second;
    // The node's accelerators are the pool's; its own instance type does not matter here.
    if (const topology::PoolDef* def = pools != nullptr ? pools->Find(facts.pool) : nullptr) {
      facts.cores_per_device = def->shape_type->cores_per_device;
    }
  } else if (const auto* type = catalog.Find(node.instance_type)) {
    const int last_known =
        previous != nullptr && previous->instance_type == node.instance_type ? previous->lnc : 0;
    const Lnc lnc = LncOf(*type, node, resources, last_known);
    facts.lnc = lnc.value;
    if (type->has_lnc && (previous == nullptr || previous->lnc != lnc.value)) {
      spdlog::info(
          "node {} ({}): LNC {} ({}{})", node.name, node.instance_type, lnc.value, lnc.source,
          std::string_view(lnc.source) == "default"
              ? fmt::format("; no {} label and allocatable is ambiguous", claims::kLabelNeuronLnc)
              : "");
    }
    auto shape = topology::NodeShape::Make(*type, facts.lnc);
    if (shape.ok()) facts.cores_per_device = shape->cores_per_device;
    ReadOutOfService(node, *type, previous, facts);
    for (const auto& resource : resources.device) {
      auto it = node.allocatable.find(resource);
      if (it != node.allocatable.end() && it->second < type->devices) {
        // kube-scheduler's own count check against allocatable still applies; say why it bites.
        spdlog::warn(
            "node {} ({}) advertises {} of {} {}: some devices are unhealthy or not "
            "registered yet",
            node.name, node.instance_type, it->second, type->devices, resource);
      }
    }
  }
  return facts;
}

}  // namespace toposched::extender
