#include "kubectl/views.h"

#include <fmt/format.h>

#include "base/json_reader.h"
#include "topology/catalog.h"

namespace toposched::kubectl {
namespace {

namespace ondemand = simdjson::ondemand;
using json::ErrorAt;
using json::ForEachElementOf;
using json::ForEachFieldOf;
using json::ForEachMapEntryOf;
using json::Path;

constexpr size_t kMaxNodes = 100000;
constexpr size_t kMaxHolds = 4096;
constexpr size_t kMaxList = 100000;  // pending pods, nodes of a why, classes, types

Status ReadDouble(ondemand::value& value, const Path& path, double& out) {
  ondemand::json_type type;
  TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(value, path, type));
  if (type == ondemand::json_type::null) return OkStatus();
  if (type != ondemand::json_type::number) return ErrorAt(path, "expected a number");
  if (auto error = value.get_double().get(out)) return json::JsonErrorAt(path, error);
  return OkStatus();
}

Status ReadInt(ondemand::value& value, const Path& path, int& out, int64_t max) {
  int64_t wide = 0;
  TOPOSCHED_RETURN_IF_ERROR(json::ReadInt64(value, path, wide));
  if (wide < 0 || wide > max) return ErrorAt(path, fmt::format("expected 0 to {}", max));
  out = static_cast<int>(wide);
  return OkStatus();
}

Status ReadCount(ondemand::value& value, const Path& path, int64_t& out) {
  TOPOSCHED_RETURN_IF_ERROR(json::ReadInt64(value, path, out));
  if (out < 0) return ErrorAt(path, "expected a count, got a negative number");
  return OkStatus();
}

// A list of ids, each in [0, max].
Status ReadInts(ondemand::value& value, const Path& path, std::vector<int>& out, int max) {
  return ForEachElementOf(value, path, [&](size_t i, ondemand::value& v, const Path& p) -> Status {
    if (i >= static_cast<size_t>(topology::kMaxCores)) return ErrorAt(path, "too many ids");
    int id = 0;
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(v, p, id, max));
    out.push_back(id);
    return OkStatus();
  });
}

// Calls fn for each element, refusing more than `limit`.
template <typename Fn>
Status ForEachBounded(ondemand::value& value, const Path& path, size_t limit, Fn&& fn) {
  return ForEachElementOf(value, path, [&](size_t i, ondemand::value& v, const Path& p) -> Status {
    if (i >= limit) return ErrorAt(path, fmt::format("more than {} entries", limit));
    return fn(v, p);
  });
}

Status CheckHeader(std::string_view key, ondemand::value& value, const Path& path,
                   std::string_view kind) {
  std::string text;
  TOPOSCHED_RETURN_IF_ERROR(json::ReadRequiredString(value, path, text));
  const std::string_view want = key == "apiVersion" ? kApiVersion : kind;
  if (text != want) {
    return ErrorAt(path, fmt::format("expected \"{}\", got \"{}\"", want, text));
  }
  return OkStatus();
}

Status ReadHold(ondemand::value& value, const Path& path, HoldView& hold) {
  return ForEachFieldOf(value, path,
                        [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
                          if (key == "pod") return json::ReadString(v, p, hold.pod);
                          if (key == "uid") return json::ReadString(v, p, hold.uid);
                          if (key == "container") return json::ReadString(v, p, hold.container);
                          if (key == "state") return json::ReadString(v, p, hold.state);
                          if (key == "unit") return json::ReadString(v, p, hold.unit);
                          if (key == "gang_seat") return json::ReadBool(v, p, hold.gang_seat);
                          if (key == "ids")
                            return ReadInts(v, p, hold.ids, topology::kMaxCores - 1);
                          return OkStatus();
                        });
}

Status ReadRequests(ondemand::value& value, const Path& path, std::vector<RequestView>& out) {
  return ForEachBounded(value, path, kMaxHolds, [&](ondemand::value& v, const Path& p) -> Status {
    RequestView& r = out.emplace_back();
    return ForEachFieldOf(v, p,
                          [&](std::string_view key, ondemand::value f, const Path& fp) -> Status {
                            if (key == "container") return json::ReadString(f, fp, r.container);
                            if (key == "init") return json::ReadBool(f, fp, r.init);
                            if (key == "request") return json::ReadString(f, fp, r.request);
                            return OkStatus();
                          });
  });
}

Status ReadUnit(ondemand::value& value, const Path& path, UnitView& unit) {
  return ForEachFieldOf(value, path,
                        [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
                          if (key == "device")
                            return ReadInt(v, p, unit.device, topology::kMaxDevices - 1);
                          if (key == "cores_used")
                            return ReadInt(v, p, unit.cores_used, topology::kMaxCores);
                          if (key == "holds")
                            return ReadInts(v, p, unit.holds, static_cast<int>(kMaxHolds) - 1);
                          return OkStatus();
                        });
}

Status ReadFree(ondemand::value& value, const Path& path, NodeView& node) {
  return ForEachFieldOf(value, path,
                        [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
                          if (key == "devices")
                            return ReadInts(v, p, node.free_devices, topology::kMaxDevices - 1);
                          if (key == "cores") return ReadCount(v, p, node.free_cores);
                          return OkStatus();
                        });
}

Status ReadNodeField(std::string_view key, ondemand::value& v, const Path& p, NodeView& node) {
  if (key == "name") return json::ReadString(v, p, node.name);
  if (key == "instance_type") return json::ReadString(v, p, node.instance_type);
  if (key == "pool") return json::ReadString(v, p, node.pool);
  if (key == "reserved_for_gang") return json::ReadString(v, p, node.reserved_for_gang);
  if (key == "error") return json::ReadString(v, p, node.error);
  if (key == "managed_by") return json::ReadString(v, p, node.managed_by);
  if (key == "not_offered") return json::ReadString(v, p, node.not_offered);
  if (key == "lnc") return ReadInt(v, p, node.lnc, 64);
  if (key == "devices") return ReadInt(v, p, node.devices, topology::kMaxDevices);
  if (key == "cores_per_device") return ReadInt(v, p, node.cores_per_device, 64);
  if (key == "fragmentation") return ReadDouble(v, p, node.fragmentation);
  if (key == "free") return ReadFree(v, p, node);
  if (key == "out_of_service") {
    return ReadInts(v, p, node.out_of_service, topology::kMaxDevices - 1);
  }
  if (key == "holds") {
    return ForEachBounded(v, p, kMaxHolds, [&](ondemand::value& h, const Path& hp) -> Status {
      return ReadHold(h, hp, node.holds.emplace_back());
    });
  }
  if (key == "units") {
    return ForEachBounded(v, p, topology::kMaxDevices,
                          [&](ondemand::value& u, const Path& up) -> Status {
                            return ReadUnit(u, up, node.units.emplace_back());
                          });
  }
  if (key == "free_sets") {
    return ForEachMapEntryOf(
        v, p, [&](std::string_view request, ondemand::value c, const Path& cp) -> Status {
          if (node.free_sets.size() >= kMaxHolds) return ErrorAt(p, "too many request classes");
          int64_t sets = 0;
          TOPOSCHED_RETURN_IF_ERROR(ReadCount(c, cp, sets));
          node.free_sets.emplace_back(std::string(request), sets);
          return OkStatus();
        });
  }
  return OkStatus();
}

// Holds and units are read in whatever order they come; their cross-references are checked
// once the node is whole.
Status CheckNode(const NodeView& node, const Path& path) {
  for (const UnitView& unit : node.units) {
    for (int h : unit.holds) {
      if (static_cast<size_t>(h) >= node.holds.size()) {
        return ErrorAt(path, fmt::format("device {} names hold {}, but the node has {}",
                                         unit.device, h, node.holds.size()));
      }
    }
    if (unit.device >= node.devices) {
      return ErrorAt(path, fmt::format("unit for device {}, but the node has {} devices",
                                       unit.device, node.devices));
    }
  }
  return OkStatus();
}

Status ReadWhy(ondemand::value& value, const Path& path, std::vector<WhyKindView>& out) {
  return ForEachMapEntryOf(
      value, path, [&](std::string_view kind, ondemand::value v, const Path& p) -> Status {
        if (out.size() >= 64) return ErrorAt(path, "too many kinds");
        WhyKindView& why = out.emplace_back();
        why.kind = std::string(kind);
        return ForEachFieldOf(
            v, p, [&](std::string_view key, ondemand::value f, const Path& fp) -> Status {
              if (key == "nodes") return ReadCount(f, fp, why.nodes);
              if (key != "example") return OkStatus();
              return ForEachFieldOf(
                  f, fp, [&](std::string_view k, ondemand::value e, const Path& ep) -> Status {
                    if (k == "node") return json::ReadString(e, ep, why.example_node);
                    if (k == "reason") return json::ReadString(e, ep, why.example_reason);
                    return OkStatus();
                  });
            });
      });
}

Status ReadPending(ondemand::value& value, const Path& path, PendingView& pod) {
  return ForEachFieldOf(value, path,
                        [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
                          if (key == "pod") return json::ReadString(v, p, pod.pod);
                          if (key == "uid") return json::ReadString(v, p, pod.uid);
                          if (key == "gang") return json::ReadString(v, p, pod.gang);
                          if (key == "requests") return ReadRequests(v, p, pod.requests);
                          if (key == "why") return ReadWhy(v, p, pod.why);
                          return OkStatus();
                        });
}

Status ReadType(std::string_view name, ondemand::value& value, const Path& path, TypeView& type) {
  type.name = std::string(name);
  return ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
        if (key == "devices") return ReadInt(v, p, type.devices, topology::kMaxDevices);
        if (key == "rule") return json::ReadString(v, p, type.rule);
        if (key == "sizes") return ReadInts(v, p, type.sizes, topology::kMaxDevices);
        if (key != "adjacency") return OkStatus();
        return ForEachBounded(
            v, p, topology::kMaxDevices, [&](ondemand::value& a, const Path& ap) -> Status {
              return ReadInts(a, ap, type.adjacency.emplace_back(), topology::kMaxDevices - 1);
            });
      });
}

Status ReadSummary(ondemand::value& value, const Path& path, FleetView& fleet) {
  return ForEachFieldOf(value, path,
                        [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
                          if (key == "nodes") return ReadCount(v, p, fleet.summary_nodes);
                          if (key == "devices") return ReadCount(v, p, fleet.summary_devices);
                          if (key == "allocated_share")
                            return ReadDouble(v, p, fleet.allocated_share);
                          if (key == "pending_pods") return ReadCount(v, p, fleet.pending_pods);
                          return OkStatus();
                        });
}

Status ReadClasses(ondemand::value& value, const Path& path, std::vector<ClassView>& out) {
  return ForEachBounded(value, path, kMaxList, [&](ondemand::value& v, const Path& p) -> Status {
    ClassView& c = out.emplace_back();
    return ForEachFieldOf(v, p,
                          [&](std::string_view key, ondemand::value f, const Path& fp) -> Status {
                            if (key == "request") return json::ReadString(f, fp, c.request);
                            if (key == "share") return ReadDouble(f, fp, c.share);
                            if (key == "free_sets") return ReadCount(f, fp, c.free_sets);
                            if (key == "cost_per_set") return ReadDouble(f, fp, c.cost_per_set);
                            return OkStatus();
                          });
  });
}

Status ReadFleetField(std::string_view key, ondemand::value& v, const Path& p, FleetView& fleet,
                      int& headers) {
  if (key == "apiVersion" || key == "kind") {
    ++headers;
    return CheckHeader(key, v, p, "FleetView");
  }
  if (key == "ready") return json::ReadBool(v, p, fleet.ready);
  if (key == "policy") return json::ReadString(v, p, fleet.policy);
  if (key == "summary") return ReadSummary(v, p, fleet);
  if (key == "classes") return ReadClasses(v, p, fleet.classes);
  if (key == "instance_types") {
    return ForEachMapEntryOf(
        v, p, [&](std::string_view name, ondemand::value t, const Path& tp) -> Status {
          if (fleet.instance_types.size() >= kMaxList) return ErrorAt(p, "too many types");
          return ReadType(name, t, tp, fleet.instance_types.emplace_back());
        });
  }
  if (key == "nodes") {
    return ForEachBounded(v, p, kMaxNodes, [&](ondemand::value& n, const Path& np) -> Status {
      NodeView& node = fleet.nodes.emplace_back();
      TOPOSCHED_RETURN_IF_ERROR(ForEachFieldOf(
          n, np, [&](std::string_view k, ondemand::value f, const Path& fp) -> Status {
            return ReadNodeField(k, f, fp, node);
          }));
      return CheckNode(node, np);
    });
  }
  if (key == "pending") {
    return ForEachBounded(v, p, kMaxList, [&](ondemand::value& e, const Path& ep) -> Status {
      return ReadPending(e, ep, fleet.pending.emplace_back());
    });
  }
  return OkStatus();
}

Status ReadNodeWhy(ondemand::value& value, const Path& path, NodeWhyView& why) {
  return ForEachFieldOf(value, path,
                        [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
                          if (key == "node") return json::ReadString(v, p, why.node);
                          if (key == "instance_type")
                            return json::ReadString(v, p, why.instance_type);
                          if (key == "kind") return json::ReadString(v, p, why.kind);
                          if (key == "reason") return json::ReadString(v, p, why.reason);
                          return OkStatus();
                        });
}

Status ReadPlacementField(std::string_view key, ondemand::value& v, const Path& p,
                          PodPlacementView& out, int& headers) {
  if (key == "apiVersion" || key == "kind") {
    ++headers;
    return CheckHeader(key, v, p, "PodPlacement");
  }
  if (key == "pod") return json::ReadString(v, p, out.pod);
  if (key == "uid") return json::ReadString(v, p, out.uid);
  if (key == "gang") return json::ReadString(v, p, out.gang);
  if (key == "requests") return ReadRequests(v, p, out.requests);
  if (key == "node") return json::ReadString(v, p, out.node);
  if (key == "state") return json::ReadString(v, p, out.state);
  if (key == "nodes_that_fit") return ReadCount(v, p, out.nodes_that_fit);
  if (key == "allocation") {
    return ForEachBounded(v, p, kMaxHolds, [&](ondemand::value& a, const Path& ap) -> Status {
      return ReadHold(a, ap, out.allocation.emplace_back());
    });
  }
  if (key == "nodes") {
    return ForEachBounded(v, p, kMaxNodes, [&](ondemand::value& n, const Path& np) -> Status {
      return ReadNodeWhy(n, np, out.nodes.emplace_back());
    });
  }
  return OkStatus();
}

template <typename Fn>
Status ReadDocument(std::string_view text, Fn&& read_field) {
  const simdjson::padded_string padded(text);
  int headers = 0;
  TOPOSCHED_RETURN_IF_ERROR(json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    return json::ForEachFieldOfRequired(
        root, Path(), "expected an object",
        [&](std::string_view key, ondemand::value v, const Path& p) -> Status {
          return read_field(key, v, p, headers);
        });
  }));
  if (headers != 2) return Error{"document: apiVersion and kind are missing"};
  return OkStatus();
}

}  // namespace

const TypeView* FleetView::Type(std::string_view name) const {
  for (const TypeView& type : instance_types) {
    if (type.name == name) return &type;
  }
  return nullptr;
}

Result<FleetView> ParseFleetView(std::string_view json) {
  FleetView fleet;
  TOPOSCHED_RETURN_IF_ERROR(ReadDocument(
      json, [&](std::string_view key, ondemand::value& v, const Path& p, int& headers) -> Status {
        return ReadFleetField(key, v, p, fleet, headers);
      }));
  return fleet;
}

Result<PodPlacementView> ParsePodPlacement(std::string_view json) {
  PodPlacementView out;
  TOPOSCHED_RETURN_IF_ERROR(ReadDocument(
      json, [&](std::string_view key, ondemand::value& v, const Path& p, int& headers) -> Status {
        return ReadPlacementField(key, v, p, out, headers);
      }));
  return out;
}

}  // namespace toposched::kubectl
