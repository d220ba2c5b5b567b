// Slot counting and the scarcity cost of a change (slots.h), and the public FreeSlots and
// PlacementCost built on them.
#include "topology/slots.h"

#include <algorithm>
#include <bit>

#include "topology/demand.h"
#include "topology/legal_sets.h"

namespace toposched::topology {

namespace {

// What slot counting reads: the free devices as a mask and, on nodes of up to 64 cores (every
// Neuron type at its default LNC), the free cores as one word; larger nodes keep a bitset.
struct FreeState {
  DeviceMask devices = 0;
  uint64_t cores = 0;   // when small
  CoreBits wide_cores;  // when !small
  bool small = true;
};

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

// Takes a set out of a FreeState: a device set (mask) or a core range [start, start+count).
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

// The free legal sets of `request` in `f`, disjoint.
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

// The cost of going from `before` to `after` on one node.
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

// A set to weigh, without its id list: a device mask, or a core range.
struct Candidate {
  DeviceMask devices = 0;
  int core_start = 0;
  int core_count = 0;
};

// The few sets worth weighing by cost: the ends of each free run (a set in a run's middle cuts it
// in three, which no demand class prefers), and on an aligned tree the first free block of each
// distinct neighbourhood (blocks whose enclosing blocks are equally free cost the same).
// Returns how many it wrote to `out`.
constexpr int kMaxCandidates = 12;
int CostCandidates(const NodeShape& shape, const NodeUsage& usage, const FreeState& state,
                   const Request& req, std::array<Candidate, kMaxCandidates>& out) {
  int found = 0;
  const int n = req.count;
  const DeviceMask free = shape.AllDevices() & ~usage.busy_devices();
  // A neighbourhood: the free devices of each aligned block above the set that holds it, packed
  // into one number (each count fits in 7 bits; at most 6 levels), plus the caller's extras.
  // The blocks' free counts are counted once here, not once per candidate start.
  constexpr int kMaxLevels = 8;
  const bool aligned = shape.type->rule == LegalSetRule::kAligned;
  const int levels = aligned ? std::min(static_cast<int>(shape.type->sizes.size()), kMaxLevels) : 0;
  std::array<std::array<uint8_t, kMaxDevices>, kMaxLevels> block_free{};
  for (int l = 0; l < levels; ++l) {
    const int level = shape.type->sizes[static_cast<size_t>(l)];
    for (int b = 0; b * level < shape.devices; ++b) {
      block_free[static_cast<size_t>(l)][static_cast<size_t>(b)] =
          static_cast<uint8_t>(std::popcount(free & RunMask(level, b * level)));
    }
  }
  const uint64_t all_free = static_cast<uint64_t>(std::popcount(free));
  std::array<uint64_t, kMaxCandidates> seen{};
  auto neighbourhood = [&](int d, int size) {
    uint64_t sig = 0;
    if (!aligned) return sig;
    for (int l = 0; l < levels; ++l) {
      const int level = shape.type->sizes[static_cast<size_t>(l)];
      if (level > size)
        sig = sig << 7 | block_free[static_cast<size_t>(l)][static_cast<size_t>(d / level)];
    }
    if (shape.devices > size) sig = sig << 7 | all_free;
    return sig;
  };
  auto add_once = [&](uint64_t sig, Candidate c) {
    if (found >= kMaxCandidates) return;
    if (found > 0 && seen[static_cast<size_t>(found - 1)] == sig) return;  // the common repeat
    for (int i = 0; i < found; ++i) {
      if (seen[static_cast<size_t>(i)] == sig) return;
    }
    seen[static_cast<size_t>(found)] = sig;
    out[static_cast<size_t>(found++)] = c;
  };
  if (req.unit == Unit::kDevice) {
    if (n == shape.devices) return 0;
    switch (shape.type->rule) {
      case LegalSetRule::kContiguous: {
        // On a ring what a set costs depends on its run's length, which end it takes, and the
        // free cores of the devices just outside the run (core requests may span into them).
        auto free_cores_of = [&](int d) -> uint64_t {
          if (d < 0 || d >= shape.devices || !state.small) return 0;
          const int cpd = shape.cores_per_device;
          return static_cast<uint64_t>(std::popcount(state.cores & RunMask(cpd, d * cpd)));
        };
        for (DeviceMask rest = free; rest != 0 && found < kMaxCandidates;) {
          const int start = std::countr_zero(rest);
          const int len = std::countr_one(rest >> start);
          rest &= ~RunMask(len, start);
          if (len < n) continue;
          const uint64_t sig = static_cast<uint64_t>(len) << 16 | free_cores_of(start - 1) << 8 |
                               free_cores_of(start + len) << 1;
          add_once(sig, {RunMask(n, start), 0, 0});
          if (len > n) add_once(sig | 1, {RunMask(n, start + len - n), 0, 0});
        }
        break;
      }
      case LegalSetRule::kAligned:
        for (int start = 0; start + n <= shape.devices; start += n) {
          if ((free & RunMask(n, start)) == RunMask(n, start)) {
            add_once(neighbourhood(start, n), {RunMask(n, start), 0, 0});
          }
        }
        break;
      case LegalSetRule::kAny:
        break;  // which free devices does not matter to any device request
    }
    return found;
  }
  const int cpd = shape.cores_per_device;
  auto consider = [&](int s, int run_len, bool run_start) {
    const int first = s / cpd;
    const int last = (s + n - 1) / cpd;
    const DeviceMask touched = RunMask(last - first + 1, first);
    uint64_t sig = neighbourhood(first, last - first + 1);
    sig = sig << 7 | static_cast<uint64_t>(std::popcount(touched & free));
    sig = sig << 4 | static_cast<uint64_t>(std::min(last - first + 1, 15));
    sig = sig << 10 | static_cast<uint64_t>(std::min(run_len, 1023));
    sig = sig << 1 | (run_start ? 0u : 1u);
    add_once(sig, {0, s, n});
  };
  if (state.small) {
    // Only the two ends of each free run inside a segment: walk the runs, not every start.
    const int segment = CoreSegment(shape, n);
    for (int seg = 0; seg < shape.cores && found < kMaxCandidates; seg += segment) {
      const int seg_len = std::min(segment, shape.cores - seg);
      for (uint64_t rest = state.cores & RunMask(seg_len, seg); rest != 0;) {
        const int start = std::countr_zero(rest);
        const int len = std::countr_one(rest >> start);
        rest &= ~RunMask(len, start);
        if (len < n) continue;
        consider(start, len, true);
        if (len > n) consider(start + len - n, len, false);
      }
    }
    return found;
  }
  const int segment = CoreSegment(shape, n);
  const CoreBits& used = usage.used_cores();
  ForEachCoreStart(shape, usage, n, [&](int s, int run_len) {
    const bool run_start = s % segment == 0 || used.test(static_cast<size_t>(s - 1));
    const int end = s + n;
    const bool run_end =
        end % segment == 0 || end == shape.cores || used.test(static_cast<size_t>(end));
    if (run_start || run_end) consider(s, run_len, run_start);
    return found < kMaxCandidates;
  });
  return found;
}

}  // namespace

// Among best-fit's choice and the other candidates, the set that costs the expected demand least;
// best-fit's choice wins ties, so with no demand to protect nothing changes.
Decision ChooseByCost(const NodeShape& shape, const NodeUsage& usage, const Request& req,
                      Decision chosen, const SlotCosts& costs) {
  const FreeState before = FreeOf(shape, usage);
  auto cost_of = [&](const Candidate& c) {
    FreeState after = before;
    TakeFrom(shape, after, c.devices, c.core_start, c.core_count);
    return CostBetween(shape, before, after, costs);
  };
  const Placement& base = chosen.placement;
  Candidate best{base.unit == Unit::kDevice ? base.devices : 0,
                 base.unit == Unit::kCore ? base.ids.front() : 0,
                 base.unit == Unit::kCore ? static_cast<int>(base.ids.size()) : 0};
  chosen.cost = cost_of(best);
  std::array<Candidate, kMaxCandidates> candidates;
  const int count = CostCandidates(shape, usage, before, req, candidates);
  bool changed = false;
  for (int i = 0; i < count; ++i) {
    const Candidate& c = candidates[static_cast<size_t>(i)];
    if (c.devices == best.devices && c.core_start == best.core_start &&
        c.core_count == best.core_count) {
      continue;
    }
    const double cost = cost_of(c);
    // A relative margin, so that float noise between equal costs never flips the choice.
    if (cost < chosen.cost - 1e-9 * chosen.cost) {
      best = c;
      chosen.cost = cost;
      changed = true;
    }
  }
  if (changed) {
    chosen.placement = best.core_count > 0 ? CorePlacement(shape, best.core_start, best.core_count)
                                           : DevicePlacement(best.devices);
  }
  return chosen;
}

int FreeSlots(const NodeShape& shape, const NodeUsage& usage, const Request& request) {
  return SlotsIn(shape, FreeOf(shape, usage), request);
}

double PlacementCost(const NodeShape& shape, const NodeUsage& before, const NodeUsage& after,
                     const SlotCosts& costs) {
  return CostBetween(shape, FreeOf(shape, before), FreeOf(shape, after), costs);
}

}  // namespace toposched::topology
