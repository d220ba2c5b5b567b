// A node's shape (an instance type at an LNC) and what is in use on it, declared in allocator.h.
#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "topology/allocator.h"

namespace toposched::topology {

std::string_view UnitName(Unit unit, int count) {
  if (unit == Unit::kDevice) return count == 1 ? "device" : "devices";
  return count == 1 ? "core" : "cores";
}

std::string RequestLabel(const Request& request) {
  return fmt::format("{} {}", request.count, UnitName(request.unit, request.count));
}

Result<NodeShape> NodeShape::Make(const InstanceType& type, int lnc) {
  NodeShape shape;
  shape.type = &type;
  shape.devices = type.devices;
  shape.cores_per_device = type.cores_per_device;
  if (type.has_lnc) {
    shape.lnc = lnc == 0 ? type.lnc.default_lnc : lnc;
    if (std::find(type.lnc.allowed.begin(), type.lnc.allowed.end(), shape.lnc) ==
        type.lnc.allowed.end()) {
      return Error{fmt::format("{} does not support LNC {} (allowed: {})", type.name, lnc,
                               fmt::join(type.lnc.allowed, ", "))};
    }
    shape.cores_per_device = type.lnc.physical_cores_per_device / shape.lnc;
  } else if (lnc != 0 && lnc != 1) {
    return Error{
        fmt::format("{} has no logical-core (LNC) setting; LNC {} does not apply", type.name, lnc)};
  }
  shape.cores = shape.devices * shape.cores_per_device;
  return shape;
}

std::vector<int> MaskToIds(DeviceMask mask) {
  std::vector<int> ids;
  while (mask != 0) {
    ids.push_back(std::countr_zero(mask));
    mask &= mask - 1;
  }
  return ids;
}

bool NodeUsage::AllFree(const NodeShape& shape, Unit unit, const std::vector<int>& ids) const {
  for (int id : ids) {
    if (unit == Unit::kDevice) {
      if (busy_devices_ >> id & 1) return false;
    } else if (used_cores_.test(static_cast<size_t>(id))) {
      return false;
    }
  }
  (void)shape;
  return true;
}

bool NodeUsage::AllUnheld(const NodeShape& shape, Unit unit, const std::vector<int>& ids) const {
  const int cpd = shape.cores_per_device;
  for (int id : ids) {
    if (unit == Unit::kCore) {
      if (held_cores_.test(static_cast<size_t>(id))) return false;
      continue;
    }
    for (int c = id * cpd; c < (id + 1) * cpd; ++c) {
      if (held_cores_.test(static_cast<size_t>(c))) return false;
    }
  }
  return true;
}

bool NodeUsage::Take(const NodeShape& shape, Unit unit, const std::vector<int>& ids) {
  if (!AllUnheld(shape, unit, ids)) return false;
  const int cpd = shape.cores_per_device;
  for (int id : ids) {
    if (unit == Unit::kDevice) {
      for (int c = id * cpd; c < (id + 1) * cpd; ++c) {
        held_cores_.set(static_cast<size_t>(c));
        used_cores_.set(static_cast<size_t>(c));
      }
      busy_devices_ |= DeviceMask{1} << id;
    } else {
      held_cores_.set(static_cast<size_t>(id));
      used_cores_.set(static_cast<size_t>(id));
      busy_devices_ |= DeviceMask{1} << (id / cpd);
    }
  }
  return true;
}

void NodeUsage::Release(const NodeShape& shape, Unit unit, const std::vector<int>& ids) {
  const int cpd = shape.cores_per_device;
  for (int id : ids) {
    if (unit == Unit::kDevice) {
      for (int c = id * cpd; c < (id + 1) * cpd; ++c) held_cores_.reset(static_cast<size_t>(c));
      RecomputeUsed(shape, id, id);
    } else {
      held_cores_.reset(static_cast<size_t>(id));
      RecomputeUsed(shape, id / cpd, id / cpd);
    }
  }
}

void NodeUsage::SetOutOfService(const NodeShape& shape, DeviceMask devices) {
  out_of_service_ = devices & shape.AllDevices();
  RecomputeUsed(shape, 0, shape.devices - 1);
}

void NodeUsage::RecomputeUsed(const NodeShape& shape, int first_device, int last_device) {
  const int cpd = shape.cores_per_device;
  for (int d = first_device; d <= last_device; ++d) {
    const bool out = (out_of_service_ >> d & 1) != 0;
    bool any = out;
    for (int c = d * cpd; c < (d + 1) * cpd; ++c) {
      const bool used = out || held_cores_.test(static_cast<size_t>(c));
      used_cores_.set(static_cast<size_t>(c), used);
      any = any || used;
    }
    if (any) {
      busy_devices_ |= DeviceMask{1} << d;
    } else {
      busy_devices_ &= ~(DeviceMask{1} << d);
    }
  }
}

}  // namespace toposched::topology
