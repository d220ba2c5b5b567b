#include "topology/allocator.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "topology/demand.h"
#include "topology/id_ranges.h"

namespace toposched::topology {
namespace {

DeviceMask RunMask(int count, int start) {
  const DeviceMask ones = count >= 64 ? ~DeviceMask{0} : ((DeviceMask{1} << count) - 1);
  return ones << start;
}

// Device-count levels of the aligned tree: the catalog's sizes plus 1 and the whole node.
std::vector<int> AlignedLevels(const NodeShape& shape) {
  std::vector<int> levels = shape.type->sizes;
  levels.push_back(1);
  levels.push_back(shape.devices);
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  return levels;
}

bool IsLegalAlignedCount(const NodeShape& shape, int count) {
  const auto& sizes = shape.type->sizes;
  return count == 1 || count == shape.devices ||
         std::find(sizes.begin(), sizes.end(), count) != sizes.end();
}

// The score of a fitting placement: mostly how tightly the request fills the free space around
// it (1.0 = exactly fills a hole), a little how full the node is afterwards (packing).
int FitScore(double tightness, int used_cores_after, int cores) {
  const double utilization = cores == 0 ? 0.0 : static_cast<double>(used_cores_after) / cores;
  const long score = std::lround(10.0 * (0.8 * tightness + 0.2 * utilization));
  return static_cast<int>(std::clamp<long>(score, 1, 10));
}

std::vector<int> FreeCoreIds(const NodeShape& shape, const NodeUsage& usage) {
  std::vector<int> ids;
  for (int c = 0; c < shape.cores; ++c) {
    if (!usage.used_cores().test(static_cast<size_t>(c))) ids.push_back(c);
  }
  return ids;
}

Placement DevicePlacement(const NodeShape& shape, DeviceMask mask) {
  (void)shape;
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

// Core requests: the length of the aligned segment a core set must stay inside.
int CoreSegment(const NodeShape& shape, int count) {
  if (shape.type->rule != LegalSetRule::kAligned) return shape.cores;
  // The smallest of AlignedLevels (1, the sizes, the node) that holds `count` cores; without
  // building the list, since slot counting asks this for every candidate.
  const int cpd = shape.cores_per_device;
  if (cpd >= count) return cpd;
  int best = shape.devices;
  for (int level : shape.type->sizes) {
    if (level * cpd >= count && level < best) best = level;
  }
  return best * cpd;
}

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

Decision Refuse(std::string reason, bool unresolvable = false) {
  Decision d;
  d.reason = std::move(reason);
  d.unresolvable = unresolvable;
  return d;
}

Decision Accept(Placement placement, int score) {
  Decision d;
  d.placement = std::move(placement);
  d.score = score;
  return d;
}

int UsedCoresAfter(const NodeShape& shape, const NodeUsage& usage, const Placement& p) {
  if (p.unit == Unit::kCore) return usage.used_core_count() + static_cast<int>(p.ids.size());
  int used = usage.used_core_count();
  for (int d : p.ids) {
    for (int c = d * shape.cores_per_device; c < (d + 1) * shape.cores_per_device; ++c) {
      used += usage.used_cores().test(static_cast<size_t>(c)) ? 0 : 1;
    }
  }
  return used;
}

std::string BlockList(int devices, int count) {
  std::vector<std::string> blocks;
  for (int s = 0; s < devices; s += count) {
    blocks.push_back(count == 1 ? fmt::format("{}", s) : fmt::format("{}-{}", s, s + count - 1));
  }
  return fmt::format("{}", fmt::join(blocks, ", "));
}

Decision AllocateCountOnly(const NodeShape& shape, const NodeUsage& usage, const Request& req) {
  if (req.unit == Unit::kDevice) {
    const DeviceMask free = shape.AllDevices() & ~usage.busy_devices();
    if (std::popcount(free) < req.count) {
      return Refuse(
          fmt::format("only {} of {} devices are free", std::popcount(free), shape.devices));
    }
    DeviceMask chosen = 0;
    DeviceMask rest = free;
    for (int i = 0; i < req.count; ++i) {
      const DeviceMask low = rest & (~rest + 1);
      chosen |= low;
      rest &= ~low;
    }
    Placement p = DevicePlacement(shape, chosen);
    return Accept(p, FitScore(1.0, UsedCoresAfter(shape, usage, p), shape.cores));
  }
  std::vector<int> free = FreeCoreIds(shape, usage);
  if (static_cast<int>(free.size()) < req.count) {
    return Refuse(fmt::format("only {} of {} cores are free", free.size(), shape.cores));
  }
  // Cores on devices already in use first: taking them keeps untouched devices whole for device
  // requests, which is what an ideal topology-blind packer would do too.
  const DeviceMask busy = usage.busy_devices();
  std::stable_partition(free.begin(), free.end(),
                        [&](int c) { return (busy >> (c / shape.cores_per_device) & 1) != 0; });
  free.resize(static_cast<size_t>(req.count));
  std::sort(free.begin(), free.end());
  Placement p = Placement::FromIds(shape, Unit::kCore, std::move(free));
  return Accept(p, FitScore(1.0, UsedCoresAfter(shape, usage, p), shape.cores));
}

Decision AllocateDevices(const NodeShape& shape, const NodeUsage& usage, const Request& req,
                         Policy policy) {
  const int n = req.count;
  const DeviceMask all = shape.AllDevices();
  const DeviceMask free = all & ~usage.busy_devices();
  const std::string& name = shape.type->name;
  auto accept = [&](DeviceMask mask, int enclosing) {
    Placement p = DevicePlacement(shape, mask);
    const double tightness = static_cast<double>(n) / enclosing;
    return Accept(p, FitScore(tightness, UsedCoresAfter(shape, usage, p), shape.cores));
  };

  if (n == shape.devices) {
    if (free == all) return accept(all, n);
    return Refuse(fmt::format("all {} devices of {} requested but devices {} are in use",
                              shape.devices, name, FormatIdRanges(MaskToIds(all & ~free))));
  }

  switch (shape.type->rule) {
    case LegalSetRule::kContiguous: {
      // Best fit: the start of the shortest free run that is long enough.
      int best_start = -1;
      int best_len = 0;
      int longest = 0;
      for (int d = 0; d < shape.devices;) {
        if (!(free >> d & 1)) {
          ++d;
          continue;
        }
        const int run_start = d;
        while (d < shape.devices && (free >> d & 1)) ++d;
        const int len = d - run_start;
        longest = std::max(longest, len);
        if (len < n) continue;
        if (best_start < 0 || (policy == Policy::kBestFit && len < best_len)) {
          best_start = run_start;
          best_len = len;
        }
      }
      if (best_start < 0) {
        return Refuse(fmt::format(
            "no {} contiguous free devices on {}: free devices are {} (longest free run {})", n,
            name, FormatIdRanges(MaskToIds(free)), longest));
      }
      return accept(RunMask(n, best_start), best_len);
    }
    case LegalSetRule::kAligned: {
      const std::vector<int> levels = AlignedLevels(shape);
      int best_start = -1;
      int best_enclosing = 0;
      for (int start = 0; start + n <= shape.devices; start += n) {
        const DeviceMask block = RunMask(n, start);
        if ((free & block) != block) continue;
        // The largest free aligned block around this one: splitting it costs that much.
        int enclosing = n;
        for (int level : levels) {
          if (level <= n) continue;
          const DeviceMask outer = RunMask(level, start / level * level);
          if ((free & outer) != outer) break;
          enclosing = level;
        }
        if (best_start < 0 || (policy == Policy::kBestFit && enclosing < best_enclosing)) {
          best_start = start;
          best_enclosing = enclosing;
        }
        if (policy == Policy::kFirstFit) break;
      }
      if (best_start < 0) {
        return Refuse(fmt::format(
            "no free aligned block of {} devices on {} (legal blocks: {}); free devices are {}", n,
            name, BlockList(shape.devices, n), FormatIdRanges(MaskToIds(free))));
      }
      return accept(RunMask(n, best_start), best_enclosing);
    }
    case LegalSetRule::kAny: {
      const int free_count = std::popcount(free);
      if (free_count < n) {
        return Refuse(fmt::format("only {} of {} devices are free on {}: free devices are {}",
                                  free_count, shape.devices, name,
                                  FormatIdRanges(MaskToIds(free))));
      }
      DeviceMask chosen = 0;
      DeviceMask rest = free;
      for (int i = 0; i < n; ++i) {
        const DeviceMask low = rest & (~rest + 1);
        chosen |= low;
        rest &= ~low;
      }
      return accept(chosen, free_count);
    }
  }
  return Refuse("internal error: unknown rule");
}

Decision AllocateCores(const NodeShape& shape, const NodeUsage& usage, const Request& req,
                       Policy policy) {
  const int n = req.count;
  const DeviceMask busy = usage.busy_devices();
  const int cpd = shape.cores_per_device;
  // Best fit, in order: break the fewest untouched devices (they serve device requests), touch the
  // fewest devices, take from the shortest free run, lowest id.
  using Key = std::tuple<int, int, int, int>;
  Key best_key{};
  int best_start = -1;
  ForEachCoreStart(shape, usage, n, [&](int s, int run_len) {
    const int first = s / cpd;
    const int last = (s + n - 1) / cpd;
    const DeviceMask touched = RunMask(last - first + 1, first);
    const Key key{std::popcount(touched & ~busy), last - first + 1, run_len, s};
    if (best_start < 0 || key < best_key) {
      best_key = key;
      best_start = s;
    }
    return policy != Policy::kFirstFit;
  });
  if (best_start < 0) {
    const int segment = CoreSegment(shape, n);
    const std::string within =
        segment < shape.cores ? fmt::format(" within one aligned block of {} devices ({} cores)",
                                            segment / cpd, segment)
                              : "";
    return Refuse(fmt::format("no {} contiguous free cores{} on {}: free cores are {}", n, within,
                              shape.type->name, FormatIdRanges(FreeCoreIds(shape, usage))));
  }
  Placement p = CorePlacement(shape, best_start, n);
  // Tightness: the share of the touched devices' free cores that this request uses.
  int free_in_touched = 0;
  for (int d : MaskToIds(p.devices)) {
    for (int c = d * cpd; c < (d + 1) * cpd; ++c) {
      free_in_touched += usage.used_cores().test(static_cast<size_t>(c)) ? 0 : 1;
    }
  }
  const double tightness = static_cast<double>(n) / std::max(free_in_touched, n);
  return Accept(p, FitScore(tightness, UsedCoresAfter(shape, usage, p), shape.cores));
}

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
                                           : DevicePlacement(shape, best.devices);
  }
  return chosen;
}

}  // namespace

std::string_view UnitName(Unit unit, int count) {
  if (unit == Unit::kDevice) return count == 1 ? "device" : "devices";
  return count == 1 ? "core" : "cores";
}

std::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kScarcity:
      return "scarcity";
    case Policy::kBestFit:
      return "best-fit";
    case Policy::kFirstFit:
      return "first-fit";
    case Policy::kSpread:
      return "spread";
    case Policy::kBinpack:
      return "binpack";
    case Policy::kCountOnly:
      return "count-only";
    case Policy::kFgd:
      return "fgd";
    case Policy::kFgdScarcitySets:
      return "fgd-scarcity-sets";
  }
  return "?";
}

Result<Policy> ParsePolicy(std::string_view name) {
  for (Policy p : {Policy::kScarcity, Policy::kBestFit, Policy::kFirstFit, Policy::kSpread,
                   Policy::kBinpack, Policy::kCountOnly, Policy::kFgd, Policy::kFgdScarcitySets}) {
    if (PolicyName(p) == name) return p;
  }
  return Error{
      fmt::format("unknown policy '{}': use scarcity, best-fit, first-fit, spread, binpack, fgd, "
                  "fgd-scarcity-sets or count-only",
                  name)};
}

Policy SetChoicePolicy(Policy policy) {
  switch (policy) {
    case Policy::kSpread:
    case Policy::kBinpack:
    case Policy::kFgd:
      return Policy::kFirstFit;
    case Policy::kFgdScarcitySets:
      return Policy::kScarcity;
    default:
      return policy;
  }
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

bool NodeUsage::Take(const NodeShape& shape, Unit unit, const std::vector<int>& ids) {
  if (!AllFree(shape, unit, ids)) return false;
  const int cpd = shape.cores_per_device;
  for (int id : ids) {
    if (unit == Unit::kDevice) {
      for (int c = id * cpd; c < (id + 1) * cpd; ++c) used_cores_.set(static_cast<size_t>(c));
      busy_devices_ |= DeviceMask{1} << id;
    } else {
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
      for (int c = id * cpd; c < (id + 1) * cpd; ++c) used_cores_.reset(static_cast<size_t>(c));
      RecomputeBusy(shape, id, id);
    } else {
      used_cores_.reset(static_cast<size_t>(id));
      RecomputeBusy(shape, id / cpd, id / cpd);
    }
  }
}

void NodeUsage::RecomputeBusy(const NodeShape& shape, int first_device, int last_device) {
  const int cpd = shape.cores_per_device;
  for (int d = first_device; d <= last_device; ++d) {
    bool any = false;
    for (int c = d * cpd; c < (d + 1) * cpd && !any; ++c)
      any = used_cores_.test(static_cast<size_t>(c));
    if (any) {
      busy_devices_ |= DeviceMask{1} << d;
    } else {
      busy_devices_ &= ~(DeviceMask{1} << d);
    }
  }
}

bool CanEverGrant(const NodeShape& shape, const Request& request) {
  if (request.count <= 0) return false;
  if (request.unit == Unit::kCore) return request.count <= shape.cores;
  if (request.count > shape.devices) return false;
  return shape.type->rule != LegalSetRule::kAligned || IsLegalAlignedCount(shape, request.count);
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

Decision Allocate(const NodeShape& shape, const NodeUsage& usage, const Request& request,
                  Policy policy, const SlotCosts* costs) {
  const bool fgd = policy == Policy::kFgd || policy == Policy::kFgdScarcitySets;
  if (fgd && costs != nullptr) {
    // FGD weighs the node by how much the chosen set grows its expected fragmentation.
    Decision d = Allocate(shape, usage, request, SetChoicePolicy(policy), costs);
    if (!d.ok()) return d;
    NodeUsage after = usage;
    after.Take(shape, d.placement.unit, d.placement.ids);
    d.cost =
        ExpectedFragmentation(shape, after, *costs) - ExpectedFragmentation(shape, usage, *costs);
    return d;
  }
  policy = SetChoicePolicy(policy);
  if (policy == Policy::kCountOnly) {
    if (request.count <= 0 ||
        request.count > (request.unit == Unit::kDevice ? shape.devices : shape.cores)) {
      return Refuse(CheckRequestShape(shape, request), true);
    }
    return AllocateCountOnly(shape, usage, request);
  }
  if (!CanEverGrant(shape, request)) return Refuse(CheckRequestShape(shape, request), true);
  // Scarcity starts from best-fit's choice: it answers whether anything fits (with best-fit's
  // reason when not) and wins every tie below.
  const Policy base = policy == Policy::kScarcity ? Policy::kBestFit : policy;
  Decision d = request.unit == Unit::kDevice ? AllocateDevices(shape, usage, request, base)
                                             : AllocateCores(shape, usage, request, base);
  if (policy != Policy::kScarcity || costs == nullptr || !d.ok()) return d;
  return ChooseByCost(shape, usage, request, std::move(d), *costs);
}

int FreeSlots(const NodeShape& shape, const NodeUsage& usage, const Request& request) {
  return SlotsIn(shape, FreeOf(shape, usage), request);
}

double PlacementCost(const NodeShape& shape, const NodeUsage& before, const NodeUsage& after,
                     const SlotCosts& costs) {
  return CostBetween(shape, FreeOf(shape, before), FreeOf(shape, after), costs);
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
    if (free == shape.AllDevices()) out.push_back(DevicePlacement(shape, free));
    return out;
  }
  switch (shape.type->rule) {
    case LegalSetRule::kContiguous:
      for (int s = 0; s + n <= shape.devices; ++s) {
        if ((free & RunMask(n, s)) == RunMask(n, s))
          out.push_back(DevicePlacement(shape, RunMask(n, s)));
      }
      break;
    case LegalSetRule::kAligned:
      for (int s = 0; s + n <= shape.devices; s += n) {
        if ((free & RunMask(n, s)) == RunMask(n, s))
          out.push_back(DevicePlacement(shape, RunMask(n, s)));
      }
      break;
    case LegalSetRule::kAny: {
      Decision d = AllocateDevices(shape, usage, request, Policy::kFirstFit);
      if (d.ok()) out.push_back(std::move(d.placement));
      break;
    }
  }
  return out;
}

}  // namespace toposched::topology
