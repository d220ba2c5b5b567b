// Multi-container fitting (fitting.h): pure, no tracker state.
#include "tracker/fitting.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace toposched::tracker {

std::string UnknownNodeReason(std::string_view node) {
  return fmt::format("node {} is not known to toposched (not yet synced, or deleted)", node);
}

FitResult UnknownNodeFit(std::string_view node) {
  FitResult r;
  r.reason = UnknownNodeReason(node);
  return r;
}
namespace {

using topology::Decision;
using topology::NodeShape;
using topology::NodeUsage;

// A usage in which only `allowed` placements' ids are free: init containers first try to reuse
// the ids of the pod's own app containers (Kubernetes' effective-request rule).
NodeUsage OnlyFree(const NodeShape& shape, const std::vector<ContainerAllocation>& allowed) {
  NodeUsage usage;
  std::vector<int> all(static_cast<size_t>(shape.cores));
  std::iota(all.begin(), all.end(), 0);
  usage.Take(shape, Unit::kCore, all);
  for (const auto& a : allowed) usage.Release(shape, a.placement.unit, a.placement.ids);
  return usage;
}

std::string ContainerLabel(const ContainerRequest& c) {
  return fmt::format("{}container '{}'", c.init ? "init " : "", c.name);
}

}  // namespace

FitResult FitOnUsage(const NodeShape& shape, NodeUsage usage, const PodSpec& pod, Policy policy,
                     bool with_ids, const topology::SlotCosts* costs) {
  FitResult result;
  // Most pods have one container asking: answer without the bookkeeping below.
  if (pod.containers.size() == 1 && !pod.containers[0].init &&
      pod.containers[0].request.count != 0) {
    const ContainerRequest& c = pod.containers[0];
    Decision d = topology::Allocate(shape, usage, c.request, policy, costs);
    if (!d.ok()) {
      result.reason = std::move(d.reason);
      result.unresolvable = d.unresolvable;
      return result;
    }
    result.fits = true;
    result.score = d.score;
    result.cost = d.cost;
    if (with_ids) result.allocation.containers.push_back({c.name, std::move(d.placement)});
    return result;
  }
  std::vector<const ContainerRequest*> apps;
  std::vector<const ContainerRequest*> inits;
  for (const auto& c : pod.containers) {
    if (c.request.count == 0) continue;
    (c.init ? inits : apps).push_back(&c);
  }
  std::stable_sort(apps.begin(), apps.end(), [](const auto* a, const auto* b) {
    return a->request.count > b->request.count;
  });
  double weighted_score = 0;
  int weight = 0;
  auto fail = [&](const ContainerRequest& c, const Decision& d) {
    FitResult r;
    r.reason =
        pod.containers.size() > 1 ? fmt::format("{}: {}", ContainerLabel(c), d.reason) : d.reason;
    r.unresolvable = d.unresolvable;
    return r;
  };
  double cost = 0;
  for (const auto* c : apps) {
    Decision d = topology::Allocate(shape, usage, c->request, policy, costs);
    if (!d.ok()) return fail(*c, d);
    usage.Take(shape, d.placement.unit, d.placement.ids);
    cost += d.cost;
    weighted_score += d.score * c->request.count;
    weight += c->request.count;
    result.allocation.containers.push_back({c->name, std::move(d.placement)});
  }
  // Init containers run one at a time, so each may reuse any ids this pod already holds: the app
  // containers' and those an earlier init container had to take.
  std::vector<ContainerAllocation> own_sets = result.allocation.containers;
  for (const auto* c : inits) {
    Decision d;
    if (!own_sets.empty()) {
      d = topology::Allocate(shape, OnlyFree(shape, own_sets), c->request, policy);
    }
    if (own_sets.empty() || !d.ok()) {
      d = topology::Allocate(shape, usage, c->request, policy, costs);
      if (!d.ok()) return fail(*c, d);
      usage.Take(shape, d.placement.unit, d.placement.ids);
      cost += d.cost;
      weighted_score += d.score * c->request.count;
      weight += c->request.count;
      own_sets.push_back({c->name, d.placement});
    }
    result.allocation.containers.push_back({c->name, std::move(d.placement)});
  }
  result.fits = true;
  result.score = weight == 0 ? 10 : static_cast<int>(std::lround(weighted_score / weight));
  result.cost = cost;
  return result;
}

bool Overlaps(const NodeShape& shape, const PodAllocation& a, const PodAllocation& b) {
  for (const auto& x : a.containers) {
    for (const auto& y : b.containers) {
      if (topology::Overlaps(shape, x.placement, y.placement)) return true;
    }
  }
  return false;
}

}  // namespace toposched::tracker
