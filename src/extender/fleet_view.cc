// The operators' views (docs/observability.md): the fleet (every Neuron node, who holds each
// unit, the legal sets still free per request class, fragmentation, the scarcity the scorer
// weighs, the pending pods and why they wait) and one pending pod's reasons per node. Read-only:
// the tracker is read in batches of nodes under its shared lock, so a bind's exclusive lock never
// waits for a whole 5,000-node walk, and each node is consistent in itself. The reasons are
// filter's own (Tracker::ForEachFit, NotOfferedReason): one home computes them.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "base/json_escape.h"
#include "base/json_writer.h"
#include "extender/fleet_reads.h"
#include "extender/fleet_state.h"
#include "extender/service.h"
#include "topology/demand.h"
#include "topology/id_ranges.h"

namespace toposched::extender {
namespace {

using Json = JsonTree;
using topology::NodeShape;
using topology::NodeUsage;
using topology::Unit;

constexpr std::string_view kApiVersion = "toposched.io/v1";

std::string Dump(const Json& json) { return WriteJson(json) + "\n"; }

Json RequestsJson(const tracker::PodSpec& pod) {
  Json out = Json::array();
  for (const auto& c : pod.containers) {
    out.push_back(
        {{"container", c.name}, {"init", c.init}, {"request", topology::RequestLabel(c.request)}});
  }
  return out;
}

// The nodes are most of a fleet view (7 MB at 5,000 nodes): written straight into the answer,
// where a JSON tree of them cost ~4x the rest of the view (bench/extender_bench.cc,
// BM_FleetView5000). Integers go in through fmt::format_int (no format string to parse), and
// what every node needs (the request classes' labels, one per-device list of holds, the free sets
// and fragmentation per node state) is made once per view, not per node.
void AppendInt(std::string& out, int64_t value) {
  const fmt::format_int text(value);
  out.append(text.data(), text.size());
}

void AppendInts(std::string& out, const std::vector<int>& ids) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i != 0) out += ',';
    AppendInt(out, ids[i]);
  }
  out += ']';
}

// What writing the nodes of one view reuses from node to node.
struct NodeWriter {
  explicit NodeWriter(const topology::SlotCosts& costs) : free(costs) {
    labels.reserve(costs.classes.size());
    for (const auto& c : costs.classes) labels.push_back(topology::RequestLabel(c));
  }

  NodeFreeMemo free;
  std::vector<std::string> labels;           // per request class of the costs
  std::vector<std::vector<int>> per_device;  // the holds on each device of the current node
};

void AppendHolds(std::string& out, const tracker::NodeView& node) {
  out += "\"holds\":[";
  bool first = true;
  for (const auto& holder : node.holders) {
    for (const auto& c : holder.containers) {
      if (!first) out += ',';
      first = false;
      out += "{\"pod\":";
      AppendJsonQuoted(out, holder.pod_name);
      out += ",\"uid\":";
      AppendJsonQuoted(out, holder.uid);
      out += ",\"gang_seat\":";
      out += holder.gang_seat ? "true" : "false";
      out += ",\"state\":\"";
      out += HoldStateName(holder.state);
      out += "\",\"container\":";
      AppendJsonQuoted(out, c.container);
      out += c.placement.unit == Unit::kDevice ? ",\"unit\":\"device\",\"ids\":"
                                               : ",\"unit\":\"core\",\"ids\":";
      AppendInts(out, c.placement.ids);
      out += '}';
    }
  }
  out += ']';
}

// Per device: the holds (indexes into "holds") touching it and how many of its cores are used.
void AppendUnits(std::string& out, const tracker::NodeView& node, NodeWriter& writer) {
  const NodeShape& shape = *node.shape;
  auto& holders = writer.per_device;
  if (holders.size() < static_cast<size_t>(shape.devices)) {
    holders.resize(static_cast<size_t>(shape.devices));
  }
  for (auto& h : holders) h.clear();
  int index = 0;
  for (const auto& holder : node.holders) {
    for (const auto& c : holder.containers) {
      ForEachDeviceOf(shape, c.placement, [&](int d) {
        if (d >= 0 && d < shape.devices) holders[static_cast<size_t>(d)].push_back(index);
      });
      ++index;
    }
  }
  out += "\"units\":[";
  for (int d = 0; d < shape.devices; ++d) {
    int used = 0;
    for (int c = d * shape.cores_per_device; c < (d + 1) * shape.cores_per_device; ++c) {
      used += node.usage.used_cores().test(static_cast<size_t>(c)) ? 1 : 0;
    }
    out += d == 0 ? "{\"device\":" : ",{\"device\":";
    AppendInt(out, d);
    out += ",\"cores_used\":";
    AppendInt(out, used);
    out += ",\"holds\":";
    AppendInts(out, holders[static_cast<size_t>(d)]);
    out += '}';
  }
  out += ']';
}

double Finite(double x) { return std::isfinite(x) ? x : 0.0; }

void AppendNode(std::string& out, const tracker::NodeView& node, NodeWriter& writer) {
  out += "{\"name\":";
  AppendJsonQuoted(out, node.info.name);
  out += ",\"instance_type\":";
  AppendJsonQuoted(out, node.info.instance_type);
  if (!node.info.pool.empty()) {
    out += ",\"pool\":";
    AppendJsonQuoted(out, node.info.pool);
  }
  if (!node.gang.empty()) {
    out += ",\"reserved_for_gang\":";
    AppendJsonQuoted(out, node.gang);
  }
  if (!node.shape) {
    out += ",\"error\":";
    AppendJsonQuoted(out, node.error);
    out += '}';
    return;
  }
  const NodeShape& shape = *node.shape;
  out += ",\"lnc\":";
  AppendInt(out, shape.lnc);
  out += ",\"devices\":";
  AppendInt(out, shape.devices);
  out += ",\"cores_per_device\":";
  AppendInt(out, shape.cores_per_device);
  out += ',';
  AppendHolds(out, node);
  out += ',';
  AppendUnits(out, node, writer);
  out += ",\"free\":{\"devices\":";
  AppendInts(out, topology::MaskToIds(shape.AllDevices() & ~node.usage.busy_devices()));
  out += ",\"cores\":";
  AppendInt(out, shape.cores - node.usage.used_core_count());
  out += '}';
  if (node.usage.out_of_service() != 0) {
    out += ",\"out_of_service\":";
    AppendInts(out, topology::MaskToIds(node.usage.out_of_service()));
  }
  out += ",\"free_sets\":{";
  const NodeFreeMemo::Answer& free = writer.free.Of(shape, node.usage);
  bool first = true;
  for (size_t c = 0; c < free.sets.size(); ++c) {
    if (!free.sets[c]) continue;
    if (!first) out += ',';
    first = false;
    out += '"';
    out += writer.labels[c];
    out += "\":";
    AppendInt(out, *free.sets[c]);
  }
  fmt::format_to(std::back_inserter(out), "}},\"fragmentation\":{}}}", Finite(free.fragmentation));
}

Json ClassesJson(const topology::SlotCosts& costs, std::span<const int64_t> supply) {
  Json out = Json::array();
  for (size_t i = 0; i < costs.classes.size(); ++i) {
    out.push_back({{"request", topology::RequestLabel(costs.classes[i])},
                   {"share", i < costs.shares.size() ? costs.shares[i] : 0.0},
                   {"free_sets", i < supply.size() ? supply[i] : 0},
                   {"cost_per_set", i < costs.per_slot.size() ? costs.per_slot[i] : 0.0}});
  }
  return out;
}

}  // namespace

std::string_view HoldStateName(tracker::HoldState state) {
  switch (state) {
    case tracker::HoldState::kReserved:
      return "reserved";
    case tracker::HoldState::kCommitted:
      return "committed";
    case tracker::HoldState::kReleasing:
      return "releasing";
  }
  return "unknown";
}

std::vector<int> DevicesOf(const NodeShape& shape, const topology::Placement& placement) {
  std::vector<int> devices;
  ForEachDeviceOf(shape, placement, [&](int d) { devices.push_back(d); });
  return devices;
}

FleetState ExtenderService::CollectFleet(const FleetQuery& query) const {
  FleetState state;
  // Copies of the service's own maps first (its lock is a leaf, never held with the tracker's).
  std::vector<PodRequests> waiting;
  {
    ReaderLock lock(mu_);
    for (const auto& [name, entry] : not_offered_) {
      if (!query.node.empty() && name != query.node) continue;
      const std::string type = entry.facts ? entry.facts->instance_type : std::string();
      if (!query.instance_type.empty() && type != query.instance_type) continue;
      state.not_offered.emplace_back(name, NotOfferedReason(name, entry.dra_held));
      state.not_offered_types.emplace(name, type);
    }
    for (const auto& [uid, pod] : pods_) {
      if (pod.node_name.empty()) waiting.push_back(pod);
    }
  }
  std::sort(state.not_offered.begin(), state.not_offered.end());
  // A pod whose bind is under way holds its ids already: it is not waiting.
  std::erase_if(waiting,
                [this](const PodRequests& p) { return tracker_.Find(p.spec.uid).has_value(); });
  std::sort(waiting.begin(), waiting.end(), [](const PodRequests& a, const PodRequests& b) {
    return std::tie(a.ns, a.name) < std::tie(b.ns, b.name);
  });

  std::vector<std::string> names = tracker_.NodeNames();  // sorted
  if (!query.node.empty()) {
    std::erase_if(names, [&](const std::string& n) { return n != query.node; });
  }
  state.views = ViewsInBatches(tracker_, names);
  if (!query.instance_type.empty()) {
    std::erase_if(state.views, [&](const tracker::NodeView& v) {
      return v.info.instance_type != query.instance_type;
    });
  }
  state.costs = tracker_.Costs();
  state.supply = tracker_.Supply();
  CapacityTally capacity;
  for (const auto& view : state.views) {
    if (!view.shape) continue;
    state.types.emplace(view.info.instance_type, view.shape->type);
    capacity.Add(view);
  }
  state.devices = capacity.devices;
  state.allocated_share = capacity.AllocatedShare();

  names.clear();
  for (const auto& v : state.views) names.push_back(v.info.name);
  for (auto& pod : waiting) {
    PendingPod entry{std::move(pod), false, {}, {}};
    if (static_cast<int>(state.pending.size()) < query.explain_pending) {
      entry.explained = true;
      entry.held_back = HoldBackReason(entry.pod);
      // Per kind: how many nodes, and the first node's words (filter's) as an example. Counted
      // per index of kWhyKinds (no map lookup per node), then kept by name.
      std::array<WhyExample, kWhyKinds.size()> kinds;
      tracker_.ForEachFit(entry.pod.spec, names, [&](size_t i, tracker::FitResult&& fit) {
        const size_t k = WhyKindIndex(WhyKind(state.views[i], entry.pod.spec, fit));
        if (k >= kinds.size()) return;  // every word WhyKind gives is in kWhyKinds
        WhyExample& kind = kinds[k];
        if (kind.nodes++ == 0) {
          kind.node = names[i];
          kind.reason = std::move(fit.reason);
        }
      });
      for (size_t k = 0; k < kinds.size(); ++k) {
        if (kinds[k].nodes > 0) entry.kinds[std::string(kWhyKinds[k])] = std::move(kinds[k]);
      }
      if (!state.not_offered.empty()) {
        entry.kinds["not-managed"] = {static_cast<int>(state.not_offered.size()),
                                      state.not_offered[0].first, state.not_offered[0].second};
      }
    }
    state.pending.push_back(std::move(entry));
  }
  return state;
}

std::string ExtenderService::FleetView(const FleetQuery& query) const {
  const FleetState state = CollectFleet(query);
  Json pending = Json::array();
  for (const PendingPod& p : state.pending) {
    Json entry = {{"pod", p.pod.ns + "/" + p.pod.name}, {"uid", p.pod.spec.uid}};
    if (p.pod.gang) entry["gang"] = p.pod.gang->id;
    entry["requests"] = RequestsJson(p.pod.spec);
    if (p.explained) {
      Json why = Json::object();
      for (const auto& [kind, value] : p.kinds) {
        why[kind] = {{"nodes", value.nodes},
                     {"example", {{"node", value.node}, {"reason", value.reason}}}};
      }
      entry["why"] = std::move(why);
      if (!p.held_back.empty()) entry["held_back"] = p.held_back;
    }
    pending.push_back(std::move(entry));
  }

  Json instance_types = Json::object();
  for (const auto& [name, type] : state.types) {
    instance_types[name] = {{"devices", type->devices},
                            {"rule", topology::RuleName(type->rule)},
                            {"sizes", type->sizes},
                            {"adjacency", type->adjacency}};
  }
  Json out = {{"apiVersion", kApiVersion},
              {"kind", "FleetView"},
              {"ready", Ready()},
              {"policy", topology::PolicyName(options_.policy)}};
  const size_t explained = static_cast<size_t>(std::count_if(
      state.pending.begin(), state.pending.end(), [](const PendingPod& p) { return p.explained; }));
  out["summary"] = {{"nodes", state.views.size() + state.not_offered.size()},
                    {"devices", state.devices},
                    {"allocated_share", state.allocated_share},
                    {"pending_pods", state.pending.size()},
                    {"pending_explained", explained}};
  out["classes"] = ClassesJson(state.costs, state.supply);
  out["instance_types"] = std::move(instance_types);
  std::string answer = WriteJson(out);
  answer.pop_back();  // the closing brace
  // The nodes are written straight into the answer (AppendNode), after the rest of it and before
  // the pending pods: a half-full 16-device node writes ~1.4 KB.
  answer.reserve(answer.size() + state.views.size() * 1600 + state.not_offered.size() * 200 + 4096);
  answer += ",\"nodes\":[";
  bool first = true;
  NodeWriter writer(state.costs);
  for (const auto& view : state.views) {
    if (!first) answer += ',';
    first = false;
    AppendNode(answer, view, writer);
  }
  for (const auto& [name, reason] : state.not_offered) {
    if (!first) answer += ',';
    first = false;
    const auto type = state.not_offered_types.find(name);
    answer += WriteJson(Json{
        {"name", name},
        {"instance_type", type != state.not_offered_types.end() ? type->second : std::string()},
        {"managed_by", "dra"},
        {"not_offered", reason}});
  }
  answer += "],\"pending\":";
  answer += WriteJson(pending);
  answer += "}\n";
  return answer;
}

Result<std::string> ExtenderService::WhyPending(std::string_view pod_key) const {
  std::optional<PodRequests> pod;
  std::vector<std::pair<std::string, std::string>> not_offered;
  {
    ReaderLock lock(mu_);
    for (const auto& [uid, p] : pods_) {
      if (p.ns.size() + 1 + p.name.size() == pod_key.size() && pod_key.starts_with(p.ns) &&
          pod_key[p.ns.size()] == '/' && pod_key.ends_with(p.name)) {
        pod = p;
        break;
      }
    }
    for (const auto& [name, entry] : not_offered_) {
      not_offered.emplace_back(name, NotOfferedReason(name, entry.dra_held));
    }
  }
  if (!pod) {
    return Error{fmt::format(
        "pod {} is not known to this extender: it asks for no resource the extender manages, "
        "or it does not exist (give namespace/name)",
        pod_key)};
  }
  std::sort(not_offered.begin(), not_offered.end());
  Json out = {{"apiVersion", kApiVersion},
              {"kind", "PodPlacement"},
              {"pod", pod->ns + "/" + pod->name},
              {"uid", pod->spec.uid},
              {"requests", RequestsJson(pod->spec)}};
  if (pod->gang) out["gang"] = pod->gang->id;
  if (auto hold = tracker_.Find(pod->spec.uid)) {
    out["node"] = hold->allocation.node;
    out["state"] = HoldStateName(hold->state);
    Json containers = Json::array();
    for (const auto& c : hold->allocation.containers) {
      containers.push_back({{"container", c.container},
                            {"unit", c.placement.unit == Unit::kDevice ? "device" : "core"},
                            {"ids", c.placement.ids}});
    }
    out["allocation"] = std::move(containers);
    return Dump(out);
  }
  const std::vector<tracker::NodeView> views = ViewsInBatches(tracker_, tracker_.NodeNames());
  std::vector<std::string> names;
  names.reserve(views.size());
  for (const auto& v : views) names.push_back(v.info.name);
  Json nodes = Json::array();
  int fits = 0;
  tracker_.ForEachFit(pod->spec, names, [&](size_t i, tracker::FitResult&& fit) {
    fits += fit.fits ? 1 : 0;
    Json node = {{"node", names[i]},
                 {"instance_type", views[i].info.instance_type},
                 {"kind", WhyKind(views[i], pod->spec, fit)}};
    if (!fit.fits) node["reason"] = std::move(fit.reason);
    nodes.push_back(std::move(node));
  });
  for (const auto& [name, reason] : not_offered) {
    nodes.push_back({{"node", name}, {"kind", "not-managed"}, {"reason", reason}});
  }
  out["nodes_that_fit"] = fits;
  out["nodes"] = std::move(nodes);
  // Filter refuses every node, whatever they say, while smaller pods go first.
  if (std::string held = HoldBackReason(*pod); !held.empty()) out["held_back"] = std::move(held);
  return Dump(out);
}

}  // namespace toposched::extender
