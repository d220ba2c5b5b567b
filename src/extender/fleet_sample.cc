// The fleet history's sample (fleet_history.h): what /v1/fleet's summary, classes and per-node
// measures say, added up per instance type, and each pending pod's closest reason. Read like the
// fleet view: the tracker in batches of nodes under its shared lock (fleet_reads.h), so a bind
// waits for one batch at most; the service's own maps copied under its leaf lock first.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "extender/fleet_history.h"
#include "extender/fleet_reads.h"
#include "extender/service.h"
#include "topology/demand.h"

namespace toposched::extender {
namespace {

// Pods with the same key get the same kind on every node: the same requests, the same gang.
std::string ShapeKey(const tracker::PodSpec& pod) {
  std::string key = pod.gang;
  for (const auto& c : pod.containers) {
    fmt::format_to(std::back_inserter(key), "|{}{}{}", c.init ? 'i' : 'a',
                   c.request.unit == topology::Unit::kDevice ? 'd' : 'c', c.request.count);
  }
  return key;
}

struct TypeTally {
  int nodes = 0;
  CapacityTally capacity;
  double fragmentation = 0;
  std::vector<std::optional<int64_t>> free_sets;
};

}  // namespace

size_t ExtenderService::ClosestKind(const tracker::PodSpec& pod,
                                    std::span<const tracker::NodeView> views,
                                    std::span<const std::string> names, int not_managed) const {
  size_t best = not_managed > 0 ? WhyKindIndex("not-managed") : WhyKindIndex("never-on-this-type");
  for (size_t i = 0; i < names.size() && best != 0; i += kViewBatch) {
    const size_t n = std::min(kViewBatch, names.size() - i);
    tracker_.ForEachFit(pod, names.subspan(i, n), [&](size_t j, tracker::FitResult&& fit) {
      best = std::min(best, WhyKindIndex(WhyKind(views[i + j], pod, fit)));
    });
  }
  return best;
}

std::optional<FleetSample> ExtenderService::SampleFleet(int64_t unix_seconds) const {
  if (!Ready()) return std::nullopt;
  std::vector<tracker::PodSpec> waiting;
  FleetSample sample;
  sample.time = unix_seconds;
  {
    ReaderLock lock(mu_);
    sample.not_managed_nodes = static_cast<int>(not_offered_.size());
    for (const auto& [uid, pod] : pods_) {
      if (pod.node_name.empty()) waiting.push_back(pod.spec);
    }
  }
  // A pod whose bind is under way holds its ids already: it is not waiting.
  std::erase_if(waiting,
                [this](const tracker::PodSpec& p) { return tracker_.Find(p.uid).has_value(); });

  const std::vector<std::string> all = tracker_.NodeNames();
  // Without the holds: the sample needs each node's usage only.
  const std::vector<tracker::NodeView> views = ViewsInBatches(tracker_, all, /*holders=*/false);
  const topology::SlotCosts costs = tracker_.Costs();
  const std::vector<int64_t> supply = tracker_.Supply();
  for (size_t i = 0; i < costs.classes.size(); ++i) {
    sample.classes.push_back(
        {topology::RequestLabel(costs.classes[i]), i < costs.shares.size() ? costs.shares[i] : 0.0,
         i < supply.size() ? supply[i] : 0, i < costs.per_slot.size() ? costs.per_slot[i] : 0.0});
  }

  std::map<std::string, TypeTally> types;
  CapacityTally fleet;
  NodeFreeMemo memo(costs);  // nodes in the same state share their free sets and fragmentation
  std::vector<std::string> names;  // of `views`, for the fits below
  names.reserve(views.size());
  for (const tracker::NodeView& view : views) {
    names.push_back(view.info.name);
    TypeTally& type = types[view.info.instance_type];
    ++type.nodes;
    type.free_sets.resize(costs.classes.size());
    if (!view.shape) continue;
    fleet.Add(view);
    type.capacity.Add(view);
    // /v1/fleet's per-node measure (fleet_view.cc, AppendNode), added up.
    const NodeFreeMemo::Answer& free = memo.Of(*view.shape, view.usage);
    if (std::isfinite(free.fragmentation)) type.fragmentation += free.fragmentation;
    const auto& sets = free.sets;
    for (size_t c = 0; c < sets.size(); ++c) {
      if (sets[c]) type.free_sets[c] = type.free_sets[c].value_or(0) + *sets[c];
    }
  }
  sample.nodes = static_cast<int>(views.size()) + sample.not_managed_nodes;
  sample.devices = fleet.devices;
  sample.allocated_share = fleet.AllocatedShare();
  for (auto& [name, t] : types) {
    sample.fragmentation += t.fragmentation;
    sample.types.push_back({name, t.nodes, t.capacity.devices, t.capacity.AllocatedDevices(),
                            t.fragmentation, std::move(t.free_sets)});
  }

  // Each pending pod counted under its closest kind; pods with the same requests share one
  // answer, and at most kMaxShapesPerSample answers are worked out (each is a filter over the
  // fleet).
  sample.pending_pods = static_cast<int>(waiting.size());
  std::map<std::string, std::vector<size_t>> shapes;
  for (size_t p = 0; p < waiting.size(); ++p) shapes[ShapeKey(waiting[p])].push_back(p);
  int worked_out = 0;
  for (const auto& [key, pods] : shapes) {
    if (worked_out++ >= kMaxShapesPerSample) {
      sample.pending_unclassified += static_cast<int>(pods.size());
      continue;
    }
    const size_t kind = ClosestKind(waiting[pods.front()], views, names, sample.not_managed_nodes);
    sample.pending_by_kind[kind] += static_cast<int>(pods.size());
  }
  return sample;
}

}  // namespace toposched::extender
