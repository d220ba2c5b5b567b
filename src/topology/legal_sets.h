// Internal to topology/: the geometry of legal sets that the allocator's policies, its slot
// counting and LegalPlacements all read (the rules themselves are listed in allocator.h). Small
// and hot helpers are inline here because slot counting calls them for every candidate set.
#ifndef TOPOSCHED_TOPOLOGY_LEGAL_SETS_H_
#define TOPOSCHED_TOPOLOGY_LEGAL_SETS_H_

#include <algorithm>
#include <bit>
#include <vector>

#include "topology/allocator.h"

namespace toposched::topology {

// `count` consecutive bits from `start`.
inline DeviceMask RunMask(int count, int start) {
  const DeviceMask ones = count >= 64 ? ~DeviceMask{0} : ((DeviceMask{1} << count) - 1);
  return ones << start;
}

// The `count` lowest set bits of `free` (REQUIRES: popcount(free) >= count): the lowest-index
// choice where any devices will do.
inline DeviceMask LowestBits(DeviceMask free, int count) {
  DeviceMask chosen = 0;
  for (int i = 0; i < count; ++i) {
    const DeviceMask low = free & (~free + 1);
    chosen |= low;
    free &= ~low;
  }
  return chosen;
}

// Device-count levels of the aligned tree: the catalog's sizes plus 1 and the whole node.
std::vector<int> AlignedLevels(const NodeShape& shape);

// Core requests: the length of the aligned segment a core set must stay inside: the smallest of
// AlignedLevels (1, the sizes, the node) that holds `count` cores, found without building the
// list, since slot counting asks this for every candidate.
inline int CoreSegment(const NodeShape& shape, int count) {
  if (shape.type->rule != LegalSetRule::kAligned) return shape.cores;
  const int cpd = shape.cores_per_device;
  if (cpd >= count) return cpd;
  int best = shape.devices;
  for (int level : shape.type->sizes) {
    if (level * cpd >= count && level < best) best = level;
  }
  return best * cpd;
}

std::vector<int> FreeCoreIds(const NodeShape& shape, const NodeUsage& usage);
Placement DevicePlacement(DeviceMask mask);
Placement CorePlacement(const NodeShape& shape, int start, int count);

// Calls fn(start, run_length) for every start of a free run of `count` cores inside one segment,
// in ascending order; stops when fn returns false.
template <typename Fn>
void ForEachCoreStart(const NodeShape& shape, const NodeUsage& usage, int count, Fn&& fn) {
  const int segment = CoreSegment(shape, count);
  const CoreBits& used = usage.used_cores();
  for (int seg_start = 0; seg_start < shape.cores; seg_start += segment) {
    const int seg_end = std::min(seg_start + segment, shape.cores);
    int c = seg_start;
    while (c < seg_end) {
      while (c < seg_end && used.test(static_cast<size_t>(c))) ++c;
      const int run_start = c;
      while (c < seg_end && !used.test(static_cast<size_t>(c))) ++c;
      const int run_len = c - run_start;
      for (int s = run_start; s + count <= c; ++s) {
        if (!fn(s, run_len)) return;
      }
    }
  }
}

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_LEGAL_SETS_H_
