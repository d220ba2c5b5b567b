// Slot counting and the scarcity cost of a change (slots.h), and the public FreeSlots and
// PlacementCost built on them.
#include "topology/slots.h"

#include <algorithm>
#include <bit>

#include "topology/demand.h"
#include "topology/legal_sets.h"

namespace toposched::topology {

FreeState FreeOf(const NodeShape& shape, const NodeUsage& usage) {
  FreeState f;
  f.devices = shape.AllDevices() & ~usage.busy_devices();
  f.small = shape.cores <= 64;
  if (f.small) {
    const uint64_t used = (usage.used_cores() & CoreBits(~uint64_t{0})).to_ullong();
    f.cores = ~used & RunMask(shape.cores, 0);
  } else {
    f.wide_cores = ~usage.used_cores();
    for (int c = shape.cores; c < kMaxCores; ++c) f.wide_cores.reset(static_cast<size_t>(c));
  }
  return f;
}

int FreeCoreCount(const FreeState& f) {
  return f.small ? std::popcount(f.cores) : static_cast<int>(f.wide_cores.count());
}

void TakeFrom(const NodeShape& shape, FreeState& f, DeviceMask devices, int core_start,
              int core_count) {
  const int cpd = shape.cores_per_device;
  if (core_count > 0) {
    const int first = core_start / cpd;
    const int last = (core_start + core_count - 1) / cpd;
    f.devices &= ~RunMask(last - first + 1, first);
    if (f.small) {
      f.cores &= ~RunMask(core_count, core_start);
    } else {
      for (int c = core_start; c < core_start + core_count; ++c)
        f.wide_cores.reset(static_cast<size_t>(c));
    }
    return;
  }
  f.devices &= ~devices;
  for (DeviceMask rest = devices; rest != 0; rest &= rest - 1) {
    const int d = std::countr_zero(rest);
    if (f.small) {
      f.cores &= ~RunMask(cpd, d * cpd);
    } else {
      for (int c = d * cpd; c < (d + 1) * cpd; ++c) f.wide_cores.reset(static_cast<size_t>(c));
    }
  }
}

int SlotsIn(const NodeShape& shape, const FreeState& f, const Request& request) {
  if (!CanEverGrant(shape, request)) return 0;
  const int n = request.count;
  if (request.unit == Unit::kDevice) {
    if (n == shape.devices) return f.devices == shape.AllDevices() ? 1 : 0;
    int slots = 0;
    switch (shape.type->rule) {
      case LegalSetRule::kContiguous:
        for (DeviceMask rest = f.devices; rest != 0;) {
          const int start = std::countr_zero(rest);
          const int len = std::countr_one(rest >> start);
          slots += len / n;
          rest &= ~RunMask(len, start);
        }
        return slots;
      case LegalSetRule::kAligned:
        for (int start = 0; start + n <= shape.devices; start += n) {
          if ((f.devices & RunMask(n, start)) == RunMask(n, start)) ++slots;
        }
        return slots;
      case LegalSetRule::kAny:
        return std::popcount(f.devices) / n;
    }
    return 0;
  }
  if (n == 1) return FreeCoreCount(f);
  const int segment = CoreSegment(shape, n);
  int slots = 0;
  for (int seg_start = 0; seg_start < shape.cores; seg_start += segment) {
    const int seg_len = std::min(segment, shape.cores - seg_start);
    if (f.small) {
      for (uint64_t rest = f.cores & RunMask(seg_len, seg_start); rest != 0;) {
        const int start = std::countr_zero(rest);
        const int len = std::countr_one(rest >> start);
        slots += len / n;
        rest &= ~RunMask(len, start);
      }
      continue;
    }
    int run = 0;
    for (int c = seg_start; c < seg_start + seg_len; ++c) {
      if (!f.wide_cores.test(static_cast<size_t>(c))) {
        slots += run / n;
        run = 0;
      } else {
        ++run;
      }
    }
    slots += run / n;
  }
  return slots;
}

namespace {

// The slots of `request` in the part of the node that a change to the devices `changed` can
// affect: the aligned blocks or core segments that hold one of them, or the whole node where
// counting is cheap or not local (rings, single cores, whole-node segments). Counted before and
// after a change, the difference is the change in FreeSlots, at a fraction of the cost.
int SlotsNear(const NodeShape& shape, const FreeState& f, const Request& request,
              DeviceMask changed) {
  if (!CanEverGrant(shape, request)) return 0;
  const int n = request.count;
  if (request.unit == Unit::kDevice) {
    if (shape.type->rule != LegalSetRule::kAligned || n == shape.devices) {
      return SlotsIn(shape, f, request);
    }
    int slots = 0;
    int last_block = -1;
    for (DeviceMask rest = changed; rest != 0; rest &= rest - 1) {
      const int block = std::countr_zero(rest) / n;
      if (block == last_block) continue;
      last_block = block;
      if ((f.devices & RunMask(n, block * n)) == RunMask(n, block * n)) ++slots;
    }
    return slots;
  }
  const int segment = CoreSegment(shape, n);
  if (n == 1 || segment >= shape.cores || !f.small) return SlotsIn(shape, f, request);
  const int cpd = shape.cores_per_device;
  int slots = 0;
  int last_segment = -1;
  for (DeviceMask rest = changed; rest != 0; rest &= rest - 1) {
    const int seg = std::countr_zero(rest) * cpd / segment;
    if (seg == last_segment) continue;
    last_segment = seg;
    const int seg_start = seg * segment;
    for (uint64_t run = f.cores & RunMask(std::min(segment, shape.cores - seg_start), seg_start);
         run != 0;) {
      const int start = std::countr_zero(run);
      const int len = std::countr_one(run >> start);
      slots += len / n;
      run &= ~RunMask(len, start);
    }
  }
  return slots;
}

// The devices whose free devices or free cores differ between two states of one node.
DeviceMask ChangedDevices(const NodeShape& shape, const FreeState& before, const FreeState& after) {
  DeviceMask changed = before.devices ^ after.devices;
  const int cpd = std::max(shape.cores_per_device, 1);
  if (before.small && after.small) {
    for (uint64_t diff = before.cores ^ after.cores; diff != 0; diff &= diff - 1) {
      changed |= DeviceMask{1} << (std::countr_zero(diff) / cpd);
    }
    return changed;
  }
  const CoreBits diff = before.wide_cores ^ after.wide_cores;
  for (int c = 0; c < shape.cores; ++c) {
    if (diff.test(static_cast<size_t>(c))) changed |= DeviceMask{1} << (c / cpd);
  }
  return changed;
}

}  // namespace

double CostBetween(const NodeShape& shape, const FreeState& before, const FreeState& after,
                   const SlotCosts& costs) {
  double cost =
      costs.per_unit *
      static_cast<double>((FreeCoreCount(before) - FreeCoreCount(after)) * UnitsPerCore(shape));
  const DeviceMask changed = ChangedDevices(shape, before, after);
  for (size_t i = 0; i < costs.classes.size(); ++i) {
    if (costs.per_slot[i] == 0) continue;
    const Request& r = costs.classes[i];
    cost += costs.per_slot[i] *
            (SlotsNear(shape, before, r, changed) - SlotsNear(shape, after, r, changed));
  }
  return cost;
}

int FreeSlots(const NodeShape& shape, const NodeUsage& usage, const Request& request) {
  return SlotsIn(shape, FreeOf(shape, usage), request);
}

double PlacementCost(const NodeShape& shape, const NodeUsage& before, const NodeUsage& after,
                     const SlotCosts& costs) {
  return CostBetween(shape, FreeOf(shape, before), FreeOf(shape, after), costs);
}

}  // namespace toposched::topology
