#include "sim/dra.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "dra/offers.h"
#include "dra/slices.h"
#include "topology/demand.h"

namespace toposched::sim {
namespace {

using topology::NodeShape;
using topology::NodeUsage;
using topology::Request;
using topology::RequestLabel;
using topology::Unit;

// One node as a DRA cluster sees it: its offers in the order its plugin last published them.
struct DraNode {
  NodeShape shape;
  NodeUsage usage;
  topology::DemandModel demand;
  std::vector<dra::Offer> offers;  // publish order
  int64_t used_units = 0;
  int64_t total_units = 0;
};

bool Matches(const dra::Offer& offer, const Request& request) {
  const auto n = static_cast<int>(offer.placement.ids.size());
  if (request.unit == Unit::kCore)
    return offer.kind == dra::OfferKind::kCores && n == request.count;
  if (request.count == 1) return offer.kind == dra::OfferKind::kDevice;
  return offer.kind == dra::OfferKind::kDeviceSet && n == request.count;
}

Unit UnitOf(const dra::Offer& offer) {
  return offer.kind == dra::OfferKind::kCores ? Unit::kCore : Unit::kDevice;
}

// The first published offer on `node` that fits `request`: what the DRA allocator takes.
const dra::Offer* FirstFree(const DraNode& node, const Request& request) {
  for (const dra::Offer& offer : node.offers) {
    if (Matches(offer, request) &&
        node.usage.AllFree(node.shape, UnitOf(offer), offer.placement.ids))
      return &offer;
  }
  return nullptr;
}

void Republish(DraNode& node, bool scarcity) {
  if (!scarcity) return;  // index order never changes
  const topology::SlotCosts costs = dra::NodeLocalCosts(node.demand, node.shape, node.usage);
  node.offers = dra::OrderForFirstFit(std::move(node.offers), node.shape, node.usage, &costs);
}

// The fleet of one variant: places a claim as the scheduler and the DRA allocator would.
class DraCluster {
 public:
  DraCluster(std::vector<DraNode> nodes, DraVariant variant)
      : nodes_(std::move(nodes)), variant_(variant), order_(nodes_.size()) {
    for (DraNode& n : nodes_) {
      Republish(n, variant_.scarcity_order);
      fleet_units_ += n.total_units;
    }
  }

  struct Grant {
    size_t node = 0;
    Unit unit = Unit::kDevice;
    std::vector<int> ids;
    int64_t units = 0;
  };
  // The node and device the pod gets, or nullopt when no node has a free matching offer.
  std::optional<Grant> Place(const Request& request) {
    for (size_t k = 0; k < nodes_.size(); ++k) order_[k] = k;
    if (variant_.spread_nodes) {
      // kube-scheduler's LeastAllocated: the emptiest node first, ties in fleet order.
      std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
        return nodes_[a].used_units * nodes_[b].total_units <
               nodes_[b].used_units * nodes_[a].total_units;
      });
    }
    for (size_t k : order_) {
      DraNode& node = nodes_[k];
      const dra::Offer* offer = FirstFree(node, request);
      if (offer == nullptr) continue;
      Grant grant;
      grant.node = k;
      grant.unit = UnitOf(*offer);
      grant.ids = offer->placement.ids;
      grant.units = static_cast<int64_t>(grant.ids.size()) *
                    (grant.unit == Unit::kDevice ? topology::kUnitsPerDevice
                                                 : topology::UnitsPerCore(node.shape));
      node.usage.Take(node.shape, grant.unit, grant.ids);
      node.used_units += grant.units;
      used_units_ += grant.units;
      // The plugin learns the claim when it prepares it, then publishes again.
      node.demand.Observe(request);
      Republish(node, variant_.scarcity_order);
      return grant;
    }
    return std::nullopt;
  }
  void Release(const Grant& grant) {
    DraNode& node = nodes_[grant.node];
    node.usage.Release(node.shape, grant.unit, grant.ids);
    node.used_units -= grant.units;
    used_units_ -= grant.units;
    Republish(node, variant_.scarcity_order);  // after Unprepare
  }
  bool CanEverGrant(const Request& request) const {
    return std::any_of(nodes_.begin(), nodes_.end(),
                       [&](const DraNode& n) { return topology::CanEverGrant(n.shape, request); });
  }
  double unallocated_share() const {
    return 1.0 - static_cast<double>(used_units_) / static_cast<double>(fleet_units_);
  }

 private:
  std::vector<DraNode> nodes_;
  DraVariant variant_;
  std::vector<size_t> order_;
  int64_t used_units_ = 0;
  int64_t fleet_units_ = 0;
};

Result<std::vector<DraNode>> BuildNodes(const topology::Catalog& catalog,
                                        const std::vector<FleetGroup>& fleet) {
  std::vector<DraNode> nodes;
  for (const FleetGroup& group : fleet) {
    const topology::InstanceType* type = catalog.Find(group.instance_type);
    if (type == nullptr) return Error{topology::Catalog::UnknownTypeMessage(group.instance_type)};
    if (group.heads > 0) {
      return Error{fmt::format("{}: shared pools have no DRA model here (one node's pool only)",
                               group.instance_type)};
    }
    TOPOSCHED_ASSIGN_OR_RETURN(NodeShape shape, NodeShape::Make(*type));
    for (int k = 0; k < group.count; ++k) {
      DraNode node;
      node.shape = shape;
      node.offers =
          dra::OrderForFirstFit(dra::LegalOffers(shape, dra::OfferScope::kDeviceSetsAndCores),
                                shape, node.usage, nullptr);
      node.total_units = static_cast<int64_t>(shape.devices) * topology::kUnitsPerDevice;
      nodes.push_back(std::move(node));
    }
  }
  if (nodes.empty()) return Error{"the fleet is empty"};
  return nodes;
}

constexpr DraVariant kVariants[] = {{false, false}, {false, true}, {true, false}, {true, true}};

}  // namespace

std::string DraVariant::Name() const {
  return fmt::format("{}/{}", scarcity_order ? "scarcity" : "index",
                     spread_nodes ? "spread" : "first-node");
}

Result<std::vector<DraResult>> SimulateDraFill(const topology::Catalog& catalog, const Trace& trace,
                                               const std::vector<FleetGroup>& fleet,
                                               uint64_t seed) {
  TOPOSCHED_ASSIGN_OR_RETURN(std::vector<DraNode> nodes, BuildNodes(catalog, fleet));
  std::vector<Request> requests;
  for (const Task& task : trace.tasks) {
    if (auto r = NeuronRequest(task)) requests.push_back(*r);
  }
  const std::vector<size_t> order = FillOrder(requests.size(), seed);
  std::vector<DraResult> results;
  for (const DraVariant& variant : kVariants) {
    DraResult result;
    result.variant = variant;
    DraCluster cluster(nodes, variant);
    for (size_t i : order) {
      const Request& request = requests[i];
      if (cluster.Place(request)) {
        ++result.placed_before_first_failure;
      } else if (!cluster.CanEverGrant(request)) {
        ++result.never_legal;
      } else {
        result.failed = true;
        result.first_failure_request = RequestLabel(request);
        break;
      }
    }
    result.placed = result.placed_before_first_failure;
    result.unallocated_share_at_first_failure = cluster.unallocated_share();
    results.push_back(std::move(result));
  }
  return results;
}

Result<std::vector<DraResult>> SimulateDraDynamic(const topology::Catalog& catalog,
                                                  const Trace& trace,
                                                  const std::vector<FleetGroup>& fleet) {
  if (!trace.has_time_columns) {
    return Error{"this trace has no creation_time and deletion_time columns: use fill mode"};
  }
  TOPOSCHED_ASSIGN_OR_RETURN(std::vector<DraNode> nodes, BuildNodes(catalog, fleet));
  struct Event {
    int64_t t = 0;
    bool arrival = false;
    size_t job = 0;
  };
  std::vector<Request> requests;
  std::vector<Event> events;
  for (const Task& task : trace.tasks) {
    const auto r = NeuronRequest(task);
    if (!r || !task.has_times) continue;
    events.push_back({task.creation_ns, true, requests.size()});
    events.push_back({task.deletion_ns, false, requests.size()});
    requests.push_back(*r);
  }
  // Departures before arrivals at the same instant, else in trace order.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.t != b.t) return a.t < b.t;
    return !a.arrival && b.arrival;
  });
  constexpr double kNsPerHour = 3600e9;
  std::vector<DraResult> results;
  for (const DraVariant& variant : kVariants) {
    DraResult result;
    result.variant = variant;
    DraCluster cluster(nodes, variant);
    std::vector<std::optional<DraCluster::Grant>> grants(requests.size());
    std::vector<int64_t> start(requests.size(), 0);
    for (const Event& e : events) {
      if (!e.arrival) {
        if (grants[e.job]) {
          result.device_hours += static_cast<double>(grants[e.job]->units) /
                                 topology::kUnitsPerDevice *
                                 static_cast<double>(e.t - start[e.job]) / kNsPerHour;
          cluster.Release(*grants[e.job]);
          grants[e.job].reset();
        }
        continue;
      }
      grants[e.job] = cluster.Place(requests[e.job]);
      start[e.job] = e.t;
      if (grants[e.job]) {
        ++result.placed;
      } else if (!cluster.CanEverGrant(requests[e.job])) {
        ++result.never_legal;
      } else {
        ++result.refused;
      }
    }
    results.push_back(std::move(result));
  }
  return results;
}

std::string FormatDraTable(const std::vector<DraResult>& results, std::string_view trace_name,
                           std::string_view fleet, Mode mode) {
  std::string out = fmt::format(
      "A DRA cluster ({}) with {} on {}: kube-scheduler's DRA allocator takes the first free\n"
      "published device that matches, so the driver's publish order decides the set; the node\n"
      "order is the scheduler's (fleet order, or least-allocated first).\n\n",
      ModeName(mode), trace_name, fleet);
  if (mode == Mode::kFill) {
    out += fmt::format("{:<22} {:>10} {:>16} {:>22}\n", "order/node choice", "placed",
                       "first refusal", "unallocated at refusal");
    for (const DraResult& r : results) {
      out += fmt::format("{:<22} {:>10} {:>16} {:>21.1f}%\n", r.variant.Name(),
                         r.placed_before_first_failure,
                         r.failed ? r.first_failure_request : std::string("none"),
                         100.0 * r.unallocated_share_at_first_failure);
    }
    out +=
        "\nplaced: pods placed before the first refusal for lack of room (never-legal counts "
        "are skipped).\n";
  } else {
    out += fmt::format("{:<22} {:>10} {:>10} {:>14}\n", "order/node choice", "placed", "refused",
                       "device-hours");
    for (const DraResult& r : results) {
      out += fmt::format("{:<22} {:>10} {:>10} {:>14.1f}\n", r.variant.Name(), r.placed, r.refused,
                         r.device_hours);
    }
    out +=
        "\nrefused: no node had a free published device matching the claim (a real cluster "
        "keeps it Pending;\nhere it is dropped, as --mode dynamic counts refusals).\n";
  }
  out +=
      "index: a naive driver's order (lowest ids first); scarcity: toposched dra-plugin's "
      "order.\n";
  return out;
}

std::string FormatDraJson(const std::vector<DraResult>& results) {
  JsonTree variants = JsonTree::array();
  for (const DraResult& r : results) {
    variants.push_back(JsonTree{{"variant", r.variant.Name()},
                                {"failed", r.failed},
                                {"placed_before_first_failure", r.placed_before_first_failure},
                                {"placed", r.placed},
                                {"refused", r.refused},
                                {"device_hours", JsonRounded(r.device_hours, 3)},
                                {"first_failure_request", r.first_failure_request},
                                {"unallocated_share_at_first_failure",
                                 JsonRounded(r.unallocated_share_at_first_failure, 6)},
                                {"never_legal", r.never_legal}});
  }
  return WriteJson(JsonTree{{"dra", std::move(variants)}}) + "\n";
}

}  // namespace toposched::sim
