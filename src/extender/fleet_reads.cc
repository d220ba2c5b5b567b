#include "extender/fleet_reads.h"

#include <algorithm>

#include "topology/demand.h"

namespace toposched::extender {
namespace {

// In units of topology::kUnitsPerDevice: what the pod's app containers need at once on `shape`.
int64_t UnitsNeeded(const topology::NodeShape& shape, const tracker::PodSpec& pod) {
  int64_t units = 0;
  for (const auto& c : pod.containers) {
    if (c.init) continue;
    units += c.request.unit == topology::Unit::kDevice
                 ? int64_t{c.request.count} * topology::kUnitsPerDevice
                 : int64_t{c.request.count} * topology::UnitsPerCore(shape);
  }
  return units;
}

}  // namespace

std::vector<tracker::NodeView> ViewsInBatches(const tracker::Tracker& tracker,
                                              std::span<const std::string> names, bool holders) {
  std::vector<tracker::NodeView> views;
  views.reserve(names.size());
  for (size_t i = 0; i < names.size(); i += kViewBatch) {
    for (auto& v :
         tracker.NodeViews(names.subspan(i, std::min(kViewBatch, names.size() - i)), holders)) {
      views.push_back(std::move(v));
    }
  }
  return views;
}

size_t WhyKindIndex(std::string_view kind) {
  return static_cast<size_t>(std::find(kWhyKinds.begin(), kWhyKinds.end(), kind) -
                             kWhyKinds.begin());
}

std::string_view WhyKind(const tracker::NodeView& node, const tracker::PodSpec& pod,
                         const tracker::FitResult& fit) {
  if (fit.fits) return "fits";
  if (!node.gang.empty() && node.gang != pod.gang) return "reserved-for-gang";
  if (fit.unresolvable || !node.shape) return "never-on-this-type";
  if (topology::FreeUnits(*node.shape, node.usage) < UnitsNeeded(*node.shape, pod)) {
    return "too-few-free";
  }
  return "no-legal-set";
}

std::vector<std::optional<int64_t>> FreeSetsPerClass(const topology::NodeShape& shape,
                                                     const topology::NodeUsage& usage,
                                                     const topology::SlotCosts& costs) {
  std::vector<std::optional<int64_t>> sets(costs.classes.size());
  for (size_t c = 0; c < costs.classes.size(); ++c) {
    if (topology::CanEverGrant(shape, costs.classes[c])) {
      sets[c] = topology::FreeSlots(shape, usage, costs.classes[c]);
    }
  }
  return sets;
}

const NodeFreeMemo::Answer& NodeFreeMemo::Of(const topology::NodeShape& shape,
                                             const topology::NodeUsage& usage) {
  auto [it, fresh] = answers_.try_emplace(topology::NodeStateKey{&shape, &usage});
  if (fresh) {
    it->second.sets = FreeSetsPerClass(shape, usage, costs_);
    it->second.fragmentation = topology::ExpectedFragmentation(shape, usage, costs_);
  }
  return it->second;
}

void CapacityTally::Add(const tracker::NodeView& node) {
  if (!node.shape) return;
  devices += node.shape->devices;
  free_units += topology::FreeUnits(*node.shape, node.usage);
  all_units += int64_t{node.shape->devices} * topology::kUnitsPerDevice;
}

double CapacityTally::AllocatedShare() const {
  return all_units > 0 ? 1.0 - static_cast<double>(free_units) / static_cast<double>(all_units)
                       : 0.0;
}

double CapacityTally::AllocatedDevices() const {
  return static_cast<double>(all_units - free_units) /
         static_cast<double>(topology::kUnitsPerDevice);
}

}  // namespace toposched::extender
