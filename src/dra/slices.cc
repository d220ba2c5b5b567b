#include "dra/slices.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "base/json_writer.h"

namespace toposched::dra {
namespace {

using topology::NodeShape;
using topology::NodeUsage;

constexpr std::string_view kOurDomain = kOurAttributeDomain;

std::string DeviceCounterSet(const NodeShape& shape, int device) {
  return shape.devices <= kMaxCountersPerSet
             ? std::string("neurondevices")
             : fmt::format("neurondevices-{}", device / kMaxCountersPerSet);
}
std::string CoreCounterSet(int core) {
  return fmt::format("neuroncores-{}", core / kMaxCountersPerSet);
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// Device widths of the torus rows AWS's attributes describe (Trainium: rows of 4); 0 when the
// node has no such grid.
int RowWidth(const NodeShape& shape) {
  if (shape.type->rule != topology::LegalSetRule::kAligned || shape.devices <= 1) return 0;
  for (int size : shape.type->sizes) {
    if (size > 1) return size;
  }
  return 0;
}

// One counter of a counter set or of a device's consumption: {"value":"N"}, a quantity.
JsonTree CounterValue(int64_t value) {
  JsonTree counter = JsonTree::object();
  counter["value"] = std::to_string(value);
  return counter;
}

JsonTree CountersOf(const std::map<std::string, int64_t>& counters) {
  JsonTree out = JsonTree::object();
  for (const auto& [name, value] : counters) out[name] = CounterValue(value);
  return out;
}

// A device's attributes, each {"int":N}, {"string":"..."} or {"version":"..."}.
class Attributes {
 public:
  void Int(const std::string& name, int64_t value) { tree_[name] = JsonTree{{"int", value}}; }
  void String(const std::string& name, std::string_view value) {
    tree_[name] = JsonTree{{"string", value.substr(0, 64)}};
  }
  void Version(const std::string& name, std::string_view value) {
    tree_[name] = JsonTree{{"version", value}};
  }
  JsonTree Take() { return std::move(tree_); }

 private:
  JsonTree tree_ = JsonTree::object();
};

JsonTree AttributesOf(const NodeFacts& facts, const NodeShape& shape, const Offer& offer) {
  Attributes attrs;
  // AWS's attributes (unqualified: the driver's own domain, neuron.aws.com).
  if (offer.kind == OfferKind::kDevice) attrs.Int("deviceId", offer.placement.ids.front());
  attrs.String("instanceType", shape.type->name);
  attrs.String("resourceType", ResourceTypeOf(offer.kind));
  if (!facts.dra_driver_version.empty())
    attrs.Version("draDriverVersion", facts.dra_driver_version);
  if (!facts.neuron_driver_version.empty())
    attrs.String("neuronDriverVersion", facts.neuron_driver_version);
  for (size_t i = 0; i < facts.network_node_layers.size() && i < 3; ++i) {
    if (!facts.network_node_layers[i].empty())
      attrs.String(fmt::format("networkNodeLayer{}", i + 1), facts.network_node_layers[i]);
  }
  if (const int row = RowWidth(shape); row > 0 && offer.kind == OfferKind::kDevice) {
    const int id = offer.placement.ids.front();
    attrs.Int("topology_x", id / row);
    attrs.Int("topology_y", id % row);
    attrs.Int("topology4_id", id / 4);
    if (shape.devices >= 8) attrs.Int("topology8_id", id / 8);
    // The connected groups AWS's claims match on (matchAttribute devicegroupN_id): the same
    // value on every device of one aligned group of N, different across groups and nodes.
    const uint64_t node_hash = Fnv1a(facts.node_name);
    for (int size : shape.type->sizes) {
      if (size <= 1 || size > shape.devices) continue;
      attrs.String(GroupAttribute(size), fmt::format("{:016x}-{}-{}", node_hash, size, id / size));
    }
  }
  // Ours: what the offer is, for our DeviceClasses' selectors, and no more: kube-scheduler copies
  // every attribute of a device into a fresh map for each CEL evaluation, per pod, per node (a
  // whole device carries as many as AWS's: our deviceCount, which neurondevices.toposched.io
  // claims read on whole devices and sets alike, where AWS's driver has its EFA devicegroup1_id).
  attrs.Int(fmt::format("{}/deviceCount", kOurDomain), std::popcount(offer.placement.devices));
  if (offer.kind == OfferKind::kCores) {
    attrs.Int(fmt::format("{}/coreCount", kOurDomain),
              static_cast<int64_t>(offer.placement.ids.size()));
    if (shape.lnc != 0) attrs.Int(fmt::format("{}/lnc", kOurDomain), shape.lnc);
  }
  return attrs.Take();
}

JsonTree DeviceOf(const NodeFacts& facts, const NodeShape& shape, const Offer& offer,
                  const SliceOptions& options) {
  JsonTree device = JsonTree::object();
  device["name"] = offer.name;
  device["attributes"] = AttributesOf(facts, shape, offer);
  if (options.partitionable) {
    JsonTree uses = JsonTree::array();
    for (const CounterUse& use : CountersConsumedBy(shape, offer)) {
      uses.push_back(
          JsonTree{{"counterSet", use.counter_set}, {"counters", CountersOf(use.counters)}});
    }
    device["consumesCounters"] = std::move(uses);
  }
  // Only a failed device's offers carry the field: a healthy offer's JSON is unchanged.
  if (const std::optional<OfferTaint> taint = TaintOf(offer, options.faults)) {
    JsonTree entry = {{"key", kUnhealthyTaintKey},
                      {"value", taint->value},
                      {"effect", TaintEffectName(options.effect)}};
    if (!taint->time_added.empty()) entry["timeAdded"] = taint->time_added;
    device["taints"] = JsonTree::array({std::move(entry)});
  }
  return device;
}

// A slice's metadata and spec up to its devices or counters, which the caller adds to "spec".
JsonTree SliceBase(const NodeFacts& facts, std::string_view name, int64_t generation,
                   int slice_count) {
  JsonTree slice = {{"apiVersion", "resource.k8s.io/v1"}, {"kind", "ResourceSlice"}};
  JsonTree metadata = {{"name", name}};
  if (!facts.node_uid.empty()) {
    metadata["ownerReferences"] = JsonTree::array({{{"apiVersion", "v1"},
                                                    {"kind", "Node"},
                                                    {"name", facts.node_name},
                                                    {"uid", facts.node_uid},
                                                    {"controller", true}}});
  }
  slice["metadata"] = std::move(metadata);
  slice["spec"] = {{"driver", kDriverName},
                   {"pool",
                    {{"name", facts.node_name},
                     {"generation", generation},
                     {"resourceSliceCount", slice_count}}},
                   {"nodeName", facts.node_name}};
  return slice;
}

}  // namespace

std::string_view TaintEffectName(TaintEffect effect) {
  return effect == TaintEffect::kNoExecute ? "NoExecute" : "NoSchedule";
}

std::optional<OfferTaint> TaintOf(const Offer& offer, const DeviceFaults& faults) {
  if (faults.empty()) return std::nullopt;
  std::optional<OfferTaint> taint;
  for (const auto& [device, fault] : faults) {  // ascending ids: the first failed device first
    if (device < 0 || device >= 64 || (offer.placement.devices >> device & 1) == 0) continue;
    if (!taint) {
      std::string value = fmt::format("neuron{}-{}", device, fault.reason);
      if (value.size() > 63) value.resize(63);  // a label value
      while (!value.empty() && !std::isalnum(static_cast<unsigned char>(value.back()))) {
        value.pop_back();
      }
      taint = OfferTaint{std::move(value), fault.time_added};
    } else if (!fault.time_added.empty() &&
               (taint->time_added.empty() || fault.time_added < taint->time_added)) {
      taint->time_added = fault.time_added;  // RFC 3339 in UTC sorts as text
    }
  }
  return taint;
}

std::string TaintProbeSlice(const NodeFacts& facts) {
  // Never stored (dry run), and named apart from the node's real slices all the same.
  JsonTree slice = SliceBase(facts, SliceNamePrefix(facts.node_name) + "-taint-probe", 1, 1);
  JsonTree taint = {{"key", kUnhealthyTaintKey}, {"value", "probe"}, {"effect", "NoSchedule"}};
  slice["spec"]["devices"] = JsonTree::array(
      {JsonTree{{"name", "probe"}, {"taints", JsonTree::array({std::move(taint)})}}});
  return WriteJson(slice);
}

topology::SlotCosts NodeLocalCosts(const topology::DemandModel& demand, const NodeShape& shape,
                                   const NodeUsage& usage) {
  std::vector<int64_t> supply;
  supply.reserve(demand.classes().size());
  for (const auto& entry : demand.classes()) {
    supply.push_back(topology::FreeSlots(shape, usage, entry.request));
  }
  return topology::SlotCosts::From(demand, supply, topology::FreeUnits(shape, usage));
}

std::pair<int, int> OfferWalkPosition(const NodeShape& shape, const Offer& offer) {
  constexpr int kLast = 1 << 20;
  if (offer.kind == OfferKind::kCores) return {kLast, 0};
  const int first = offer.placement.ids.front();
  const int size = static_cast<int>(offer.placement.ids.size());
  if (const int row = RowWidth(shape); row > 0) {
    if (offer.kind == OfferKind::kDevice) return {first / row, 1};
    if (size == row) return {first / row, 0};
    return {shape.devices / row + 1, 0};
  }
  return {0, offer.kind == OfferKind::kDevice ? 0 : 1};
}

std::vector<Offer> OrderForFirstFit(std::vector<Offer> offers, const NodeShape& shape,
                                    const NodeUsage& usage, const topology::SlotCosts* costs) {
  auto position = [&shape](const Offer& o) { return OfferWalkPosition(shape, o); };
  // Index order: by kind, size, first id (LegalOffers' own order, restated so any input sorts).
  auto index_less = [&](const Offer& a, const Offer& b) {
    if (position(a) != position(b)) return position(a) < position(b);
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.placement.ids.size() != b.placement.ids.size())
      return a.placement.ids.size() < b.placement.ids.size();
    return a.placement.ids < b.placement.ids;
  };
  if (costs == nullptr) {
    std::stable_sort(offers.begin(), offers.end(), index_less);
    return offers;
  }
  struct Keyed {
    Offer offer;
    bool free = false;
    double cost = 0;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(offers.size());
  for (Offer& o : offers) {
    Keyed k{std::move(o)};
    const topology::Unit unit =
        k.offer.kind == OfferKind::kCores ? topology::Unit::kCore : topology::Unit::kDevice;
    k.free = usage.AllFree(shape, unit, k.offer.placement.ids);
    if (k.free) {
      NodeUsage after = usage;
      after.Take(shape, unit, k.offer.placement.ids);
      k.cost = topology::PlacementCost(shape, usage, after, *costs);
    }
    keyed.push_back(std::move(k));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const Keyed& a, const Keyed& b) {
    if (position(a.offer) != position(b.offer)) return position(a.offer) < position(b.offer);
    if (a.offer.kind != b.offer.kind) return a.offer.kind < b.offer.kind;
    if (a.free != b.free) return a.free;
    if (a.free && a.cost != b.cost) return a.cost < b.cost;
    return index_less(a.offer, b.offer);
  });
  std::vector<Offer> out;
  out.reserve(keyed.size());
  for (Keyed& k : keyed) out.push_back(std::move(k.offer));
  return out;
}

std::map<std::string, std::map<std::string, int64_t>> CounterSetsOf(const NodeShape& shape,
                                                                    bool core_counters) {
  std::map<std::string, std::map<std::string, int64_t>> sets;
  for (int d = 0; d < shape.devices; ++d) {
    sets[DeviceCounterSet(shape, d)][fmt::format("d{}", d)] = shape.cores_per_device;
  }
  if (!core_counters) return sets;
  for (int c = 0; c < shape.cores; ++c) sets[CoreCounterSet(c)][fmt::format("c{}", c)] = 1;
  return sets;
}

std::vector<CounterUse> CountersConsumedBy(const NodeShape& shape, const Offer& offer) {
  std::map<std::string, CounterUse> uses;
  auto use = [&](const std::string& set, std::string counter, int64_t value) {
    CounterUse& u = uses[set];
    u.counter_set = set;
    u.counters[std::move(counter)] += value;
  };
  if (offer.kind == OfferKind::kCores) {
    const int device = offer.placement.ids.front() / shape.cores_per_device;
    use(DeviceCounterSet(shape, device), fmt::format("d{}", device),
        static_cast<int64_t>(offer.placement.ids.size()));
    for (int c : offer.placement.ids) use(CoreCounterSet(c), fmt::format("c{}", c), 1);
  } else {
    for (int d : offer.placement.ids)
      use(DeviceCounterSet(shape, d), fmt::format("d{}", d), shape.cores_per_device);
  }
  std::vector<CounterUse> out;
  out.reserve(uses.size());
  for (auto& [name, u] : uses) out.push_back(std::move(u));
  return out;
}

std::string SliceNamePrefix(std::string_view node_name) {
  // A DNS subdomain is at most 253 characters; the longest suffix is "-neuron-zc-NN" (13).
  constexpr size_t kRoom = 253 - 16;
  if (node_name.size() <= kRoom) return fmt::format("{}-neuron", node_name);
  std::string_view head = node_name.substr(0, kRoom - 17);
  while (!head.empty() && (head.back() == '-' || head.back() == '.')) head.remove_suffix(1);
  return fmt::format("{}-{:016x}-neuron", head, Fnv1a(node_name));
}

std::vector<ResourceSliceObject> BuildSlices(const NodeFacts& facts, const NodeShape& shape,
                                             const std::vector<Offer>& ordered,
                                             const SliceOptions& options) {
  // Counters or taints lower the limit (a tainted slice without counters: whole devices only, at
  // most 64 of them on any type of the catalog, so one slice either way).
  const bool tainted = std::any_of(ordered.begin(), ordered.end(), [&](const Offer& o) {
    return TaintOf(o, options.faults).has_value();
  });
  const int per_slice =
      options.partitionable || tainted ? kMaxDevicesPerSliceWithCounters : kMaxDevicesPerSlice;
  const int device_slices =
      std::max<int>(1, static_cast<int>((ordered.size() + per_slice - 1) / per_slice));
  // Core counters only where core ranges are offered: every counter is validated per pod per node.
  const bool core_ranges = std::any_of(ordered.begin(), ordered.end(),
                                       [](const Offer& o) { return o.kind == OfferKind::kCores; });
  const auto counter_sets = options.partitionable
                                ? CounterSetsOf(shape, core_ranges)
                                : std::map<std::string, std::map<std::string, int64_t>>{};
  const int counter_slices = static_cast<int>((counter_sets.size() + kMaxCounterSetsPerSlice - 1) /
                                              kMaxCounterSetsPerSlice);
  const int total = device_slices + counter_slices;
  const std::string prefix = SliceNamePrefix(facts.node_name);

  std::vector<ResourceSliceObject> out;
  for (int s = 0; s < device_slices; ++s) {
    ResourceSliceObject slice;
    slice.name = fmt::format("{}-{:02d}", prefix, s);
    JsonTree tree = SliceBase(facts, slice.name, options.generation, total);
    JsonTree devices = JsonTree::array();
    const size_t begin = static_cast<size_t>(s) * per_slice;
    const size_t end = std::min(ordered.size(), begin + per_slice);
    for (size_t i = begin; i < end; ++i) {
      devices.push_back(DeviceOf(facts, shape, ordered[i], options));
    }
    tree["spec"]["devices"] = std::move(devices);
    slice.json = WriteJson(tree);
    slice.devices = static_cast<int>(end - begin);
    out.push_back(std::move(slice));
  }
  auto set_it = counter_sets.begin();
  for (int s = 0; s < counter_slices; ++s) {
    ResourceSliceObject slice;
    slice.name = fmt::format("{}-zc-{:02d}", prefix, s);
    JsonTree tree = SliceBase(facts, slice.name, options.generation, total);
    JsonTree sets = JsonTree::array();
    for (int k = 0; k < kMaxCounterSetsPerSlice && set_it != counter_sets.end(); ++k, ++set_it) {
      sets.push_back(JsonTree{{"name", set_it->first}, {"counters", CountersOf(set_it->second)}});
    }
    tree["spec"]["sharedCounters"] = std::move(sets);
    slice.json = WriteJson(tree);
    out.push_back(std::move(slice));
  }
  return out;
}

}  // namespace toposched::dra
