// The policies: how a set is chosen on one node (best fit, first fit, count only, and scarcity's
// weighing of a few candidates by what they cost the expected demand), declared in allocator.h.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "topology/allocator.h"
#include "topology/demand.h"
#include "topology/id_ranges.h"
#include "topology/legal_sets.h"
#include "topology/slots.h"

namespace toposched::topology {
namespace {

// The score of a fitting placement: mostly how tightly the request fills the free space around
// it (1.0 = exactly fills a hole), a little how full the node is afterwards (packing).
int FitScore(double tightness, int used_cores_after, int cores) {
  const double utilization = cores == 0 ? 0.0 : static_cast<double>(used_cores_after) / cores;
  const long score = std::lround(10.0 * (0.8 * tightness + 0.2 * utilization));
  return static_cast<int>(std::clamp<long>(score, 1, 10));
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
    Placement p = DevicePlacement(LowestBits(free, req.count));
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
    Placement p = DevicePlacement(mask);
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
      return accept(LowestBits(free, n), free_count);
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
                                           : DevicePlacement(best.devices);
  }
  return chosen;
}

}  // namespace

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

}  // namespace toposched::topology
