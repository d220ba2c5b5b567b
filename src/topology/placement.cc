// Placement geometry, declared in allocator.h beside Placement: building a placement from ids and
// which cores and devices a set of ids covers. The one place a device mask is filled from ids.
#include "topology/allocator.h"

namespace toposched::topology {

Placement Placement::FromIds(Unit unit, std::vector<int> ids, int cores_per_device) {
  Placement p{unit, std::move(ids), 0};
  for (int id : p.ids) {
    if (id < 0) continue;
    const int device = unit == Unit::kDevice ? id : id / cores_per_device;
    if (device < kMaxDevices) p.devices |= DeviceMask{1} << device;
  }
  return p;
}

CoreBits CoresOf(const NodeShape& shape, const Placement& p) {
  CoreBits bits;
  for (int id : p.ids) {
    if (p.unit == Unit::kCore) {
      if (id >= 0 && id < shape.cores) bits.set(static_cast<size_t>(id));
    } else if (id >= 0 && id < shape.devices) {
      for (int k = 0; k < shape.cores_per_device; ++k) {
        bits.set(static_cast<size_t>(id * shape.cores_per_device + k));
      }
    }
  }
  return bits;
}

bool Overlaps(const NodeShape& shape, const Placement& a, const Placement& b) {
  return (CoresOf(shape, a) & CoresOf(shape, b)).any();
}

}  // namespace toposched::topology
