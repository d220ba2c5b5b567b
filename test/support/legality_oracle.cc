// The legality oracle (legality_oracle.h). Written from docs/topology.md's rules; shares no code
// with src/topology beyond the shape and catalog types.
#include "support/legality_oracle.h"

#include <algorithm>
#include <bit>

namespace toposched::testing {

using topology::CoreBits;
using topology::DeviceMask;
using topology::LegalSetRule;
using topology::NodeShape;
using topology::Placement;
using topology::Unit;

DeviceMask MaskOf(const std::vector<int>& devices) {
  DeviceMask m = 0;
  for (int d : devices) m |= DeviceMask{1} << d;
  return m;
}

DeviceMask TouchedBy(const NodeShape& shape, const std::vector<int>& cores) {
  DeviceMask m = 0;
  for (int c : cores) m |= DeviceMask{1} << (c / shape.cores_per_device);
  return m;
}

DeviceMask DevicesOfCores(const NodeShape& shape, const CoreBits& cores) {
  DeviceMask m = 0;
  for (int c = 0; c < shape.cores; ++c) {
    if (cores.test(static_cast<size_t>(c))) m |= DeviceMask{1} << (c / shape.cores_per_device);
  }
  return m;
}

CoreBits CoresCovered(const NodeShape& shape, const Placement& p) {
  CoreBits bits;
  for (int id : p.ids) {
    if (p.unit == Unit::kCore) {
      bits.set(static_cast<size_t>(id));
    } else {
      for (int k = 0; k < shape.cores_per_device; ++k) {
        bits.set(static_cast<size_t>(id * shape.cores_per_device + k));
      }
    }
  }
  return bits;
}

int CoreBlock(const NodeShape& shape, int n) {
  if (shape.type->rule != LegalSetRule::kAligned) return shape.cores;
  std::vector<int> levels = shape.type->sizes;
  levels.push_back(1);
  levels.push_back(shape.devices);
  std::sort(levels.begin(), levels.end());
  for (int level : levels) {
    if (level * shape.cores_per_device >= n) return level * shape.cores_per_device;
  }
  return shape.cores;
}

bool LegalDeviceSet(const NodeShape& shape, DeviceMask set) {
  const int n = std::popcount(set);
  if (n == 0) return false;
  if (n == 1 || set == shape.AllDevices()) return true;
  const int lo = std::countr_zero(set);
  const int hi = 63 - std::countl_zero(set);
  switch (shape.type->rule) {
    case LegalSetRule::kContiguous:
      return hi - lo + 1 == n;
    case LegalSetRule::kAligned: {
      const auto& sizes = shape.type->sizes;
      return std::find(sizes.begin(), sizes.end(), n) != sizes.end() && hi - lo + 1 == n &&
             lo % n == 0;
    }
    case LegalSetRule::kAny:
      return true;
  }
  return false;
}

bool LegalCoreSet(const NodeShape& shape, const std::vector<int>& ids) {
  if (ids.empty()) return false;
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] != ids[i - 1] + 1) return false;
  }
  const int block = CoreBlock(shape, static_cast<int>(ids.size()));
  return ids.front() / block == ids.back() / block;
}

std::string WhyIllegal(const NodeShape& shape, const Placement& p) {
  const int n = static_cast<int>(p.ids.size());
  if (n == 0) return "empty";
  const int limit = p.unit == Unit::kDevice ? shape.devices : shape.cores;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    if (p.ids[i] < 0 || p.ids[i] >= limit) return "out of range";
    if (i > 0 && p.ids[i] <= p.ids[i - 1]) return "not ascending";
  }
  const DeviceMask touched = p.unit == Unit::kDevice ? MaskOf(p.ids) : TouchedBy(shape, p.ids);
  if (touched != p.devices) return "devices mask is not the devices the ids touch";
  if (p.unit == Unit::kCore) {
    if (p.ids.back() - p.ids.front() + 1 != n) return "cores not contiguous";
    return LegalCoreSet(shape, p.ids) ? "" : "cores straddle a block";
  }
  return LegalDeviceSet(shape, touched) ? "" : "devices not a legal set for the type's rule";
}

}  // namespace toposched::testing
