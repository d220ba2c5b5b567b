#include "topology/demand.h"

#include <algorithm>
#include <bit>

namespace toposched::topology {
namespace {

// The prior: what Neuron workloads typically ask for before any pod has been seen. Single devices
// and cores dominate; the multi-device counts are the ones every instance type's rules allow
// (rings take any count, the Trainium torus 1/4/8/16), so the prior protects no type's blocks
// over another's. Relative weights; they sum to 1.
struct PriorEntry {
  Request request;
  double share;
};
constexpr PriorEntry kPrior[] = {
    {{Unit::kDevice, 1}, 0.30},  {{Unit::kCore, 1}, 0.15},   {{Unit::kCore, 2}, 0.15},
    {{Unit::kDevice, 2}, 0.10},  {{Unit::kDevice, 4}, 0.12}, {{Unit::kDevice, 8}, 0.12},
    {{Unit::kDevice, 16}, 0.06},
};

}  // namespace

DemandModel::DemandModel(double window, double prior_weight)
    : decay_(window > 1 ? 1.0 - 1.0 / window : 0.0) {
  for (const PriorEntry& p : kPrior) classes_.push_back({p.request, p.share * prior_weight});
}

void DemandModel::Observe(const Request& request) {
  if (request.count <= 0) return;
  ++observed_;
  Entry* mine = nullptr;
  for (Entry& e : classes_) {
    e.weight *= decay_;
    if (e.request == request) mine = &e;
  }
  if (mine != nullptr) {
    mine->weight += 1;
    return;
  }
  ++generation_;
  if (static_cast<int>(classes_.size()) < kMaxClasses) {
    classes_.push_back({request, 1});
    return;
  }
  // Full: the new class takes the lightest one's index.
  auto lightest =
      std::min_element(classes_.begin(), classes_.end(),
                       [](const Entry& a, const Entry& b) { return a.weight < b.weight; });
  *lightest = {request, 1};
}

double DemandModel::total_weight() const {
  double total = 0;
  for (const Entry& e : classes_) total += e.weight;
  return total;
}

int64_t FreeUnits(const NodeShape& shape, const NodeUsage& usage) {
  return (shape.cores - usage.used_core_count()) * UnitsPerCore(shape);
}

SlotCosts SlotCosts::From(const DemandModel& demand, std::span<const int64_t> supply,
                          int64_t free_units) {
  SlotCosts out;
  // Capacity is a class every request belongs to (share 1); its supply is the free devices.
  if (free_units > 0) {
    const double devices = static_cast<double>(free_units) / kUnitsPerDevice;
    out.per_unit = 1.0 / (devices * devices) / kUnitsPerDevice;
  }
  const double total = demand.total_weight();
  const auto& classes = demand.classes();
  out.classes.reserve(classes.size());
  out.per_slot.reserve(classes.size());
  for (size_t i = 0; i < classes.size(); ++i) {
    out.classes.push_back(classes[i].request);
    const double slots = i < supply.size() ? static_cast<double>(supply[i]) : 0.0;
    const double share = total > 0 ? classes[i].weight / total : 0.0;
    out.per_slot.push_back(slots > 0 ? share / (slots * slots) : 0.0);
    out.shares.push_back(share);
  }
  return out;
}

double ExpectedFragmentation(const NodeShape& shape, const NodeUsage& usage,
                             const SlotCosts& costs) {
  const int64_t free_units = FreeUnits(shape, usage);
  if (free_units == 0) return 0;
  double expected = 0;
  for (size_t i = 0; i < costs.classes.size() && i < costs.shares.size(); ++i) {
    const Request& request = costs.classes[i];
    if (costs.shares[i] <= 0) continue;
    int64_t usable = 0;
    if (shape.type->rule == LegalSetRule::kAny && request.unit == Unit::kDevice &&
        request.count != shape.devices) {
      // Every subset is legal: each wholly free device serves, if there are enough of them.
      const int free_devices = std::popcount(shape.AllDevices() & ~usage.busy_devices());
      if (free_devices >= request.count) usable = free_devices * kUnitsPerDevice;
    } else {
      CoreBits covered;
      for (const Placement& p : LegalPlacements(shape, usage, request))
        covered |= CoresOf(shape, p);
      usable = static_cast<int64_t>(covered.count()) * UnitsPerCore(shape);
    }
    expected += costs.shares[i] * static_cast<double>(free_units - usable);
  }
  return expected / kUnitsPerDevice;
}

}  // namespace toposched::topology
