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
  if (!d.ok() && usage.out_of_service() != 0) {
    const std::vector<int> out = MaskToIds(usage.out_of_service());
    d.reason +=
        fmt::format(" ({} {} out of service)",
                    UnitName(Unit::kDevice, static_cast<int>(out.size())), FormatIdRanges(out));
  }
  if (policy != Policy::kScarcity || costs == nullptr || !d.ok()) return d;
  return ChooseByCost(shape, usage, request, std::move(d), *costs);
}

}  // namespace toposched::topology
