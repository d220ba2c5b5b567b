// Which sets of ids are legal on a node: the rules of allocator.h as code (whether a count can
// ever be granted, the refusal text when not, and every free legal set).
#include "topology/legal_sets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace toposched::topology {

std::vector<int> AlignedLevels(const NodeShape& shape) {
  std::vector<int> levels = shape.type->sizes;
  levels.push_back(1);
  levels.push_back(shape.devices);
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  return levels;
}

std::vector<int> FreeCoreIds(const NodeShape& shape, const NodeUsage& usage) {
  std::vector<int> ids;
  for (int c = 0; c < shape.cores; ++c) {
    if (!usage.used_cores().test(static_cast<size_t>(c))) ids.push_back(c);
  }
  return ids;
}

Placement DevicePlacement(DeviceMask mask) {
  return Placement{Unit::kDevice, MaskToIds(mask), mask};
}

Placement CorePlacement(const NodeShape& shape, int start, int count) {
  Placement p{Unit::kCore, {}, 0};
  p.ids.reserve(static_cast<size_t>(count));
  for (int c = start; c < start + count; ++c) p.ids.push_back(c);
  const int first = start / shape.cores_per_device;
  const int last = (start + count - 1) / shape.cores_per_device;
  p.devices = RunMask(last - first + 1, first);
  return p;
}

std::string CheckRequestShape(const NodeShape& shape, const Request& request) {
  if (CanEverGrant(shape, request)) return {};
  const std::string& name = shape.type->name;
  if (request.count <= 0) {
    return fmt::format("a request of {} {} is not valid: ask for at least 1", request.count,
                       UnitName(request.unit, request.count));
  }
  if (request.unit == Unit::kDevice) {
    if (request.count > shape.devices) {
      return fmt::format("{} devices requested but {} has only {}", request.count, name,
                         shape.devices);
    }
    if (shape.type->rule == LegalSetRule::kAligned && !IsLegalAlignedCount(shape, request.count)) {
      // AWS's extension's exact text, so alerts and runbooks written for it still match.
      return fmt::format(
          "Instance type {} does not support requests for device: {}. Please request a different "
          "number of devices.",
          name, request.count);
    }
    return {};
  }
  if (request.count > shape.cores) {
    return fmt::format("{} cores requested but {} has only {}{}", request.count, name, shape.cores,
                       shape.lnc != 0 ? fmt::format(" at LNC {}", shape.lnc) : "");
  }
  return {};
}

std::vector<Placement> LegalPlacements(const NodeShape& shape, const NodeUsage& usage,
                                       const Request& request) {
  std::vector<Placement> out;
  if (!CheckRequestShape(shape, request).empty()) return out;
  const int n = request.count;
  if (request.unit == Unit::kCore) {
    ForEachCoreStart(shape, usage, n, [&](int s, int) {
      out.push_back(CorePlacement(shape, s, n));
      return true;
    });
    return out;
  }
  const DeviceMask free = shape.AllDevices() & ~usage.busy_devices();
  if (n == shape.devices) {
    if (free == shape.AllDevices()) out.push_back(DevicePlacement(free));
    return out;
  }
  switch (shape.type->rule) {
    case LegalSetRule::kContiguous:
      for (int s = 0; s + n <= shape.devices; ++s) {
        if ((free & RunMask(n, s)) == RunMask(n, s)) out.push_back(DevicePlacement(RunMask(n, s)));
      }
      break;
    case LegalSetRule::kAligned:
      for (int s = 0; s + n <= shape.devices; s += n) {
        if ((free & RunMask(n, s)) == RunMask(n, s)) out.push_back(DevicePlacement(RunMask(n, s)));
      }
      break;
    case LegalSetRule::kAny:
      // Every subset is legal: the lowest-index one stands for them all.
      if (std::popcount(free) >= n) out.push_back(DevicePlacement(LowestBits(free, n)));
      break;
  }
  return out;
}

std::string CheckLegalSet(const NodeShape& shape, Unit unit, std::vector<int> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const int limit = unit == Unit::kCore ? shape.cores : shape.devices;
  const char* what = unit == Unit::kCore ? "core" : "device";
  if (ids.empty()) return fmt::format("no {} is named", what);
  if (ids.front() < 0 || ids.back() >= limit) {
    return fmt::format("{} {} is not one of this {} node's {} {}s", what,
                       ids.front() < 0 ? ids.front() : ids.back(), shape.type->name, limit, what);
  }
  const Request request{unit, static_cast<int>(ids.size())};
  if (std::string shape_error = CheckRequestShape(shape, request); !shape_error.empty()) {
    return shape_error;
  }
  if (unit == Unit::kDevice && shape.type->rule == LegalSetRule::kAny) return "";
  for (const Placement& p : LegalPlacements(shape, NodeUsage{}, request)) {
    if (p.ids == ids) return "";
  }
  return fmt::format("{}s {} are not one legal set of {} on a {} node (rule {}: {})", what,
                     fmt::join(ids, ","), ids.size(), shape.type->name, RuleName(shape.type->rule),
                     unit == Unit::kCore ? "a run of cores inside one allowed segment"
                     : shape.type->rule == LegalSetRule::kAligned
                         ? "whole aligned blocks of an allowed size"
                         : "a contiguous run of devices");
}

}  // namespace toposched::topology
