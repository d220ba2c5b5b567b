#include "kubectl/render.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "claims/annotations.h"
#include "claims/resources.h"
#include "topology/allocator.h"
#include "topology/id_ranges.h"

namespace toposched::kubectl {
namespace {

using Json = JsonTree;

std::string Dump(const Json& json) { return WriteJson(json, 2) + "\n"; }

Json Header(std::string_view kind, const Rendering& how) {
  return {{"apiVersion", kApiVersion}, {"kind", kind}, {"source", how.source}};
}

// A table row: each cell padded to its column's width. A first cell wider than its column goes
// on a line of its own (names are never cut: they are what an operator copies); others are cut
// with '~'. Trailing spaces are dropped.
std::string Row(std::vector<std::string> cells, const std::vector<size_t>& widths) {
  std::string out;
  if (!cells.empty() && cells.size() > 1 && cells[0].size() > widths[0]) {
    for (const std::string& line : Wrap(cells[0], kTerminalWidth, 2)) out += line + "\n";
    cells[0].clear();
  }
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    std::string cell = cells[i];
    if (i + 1 < cells.size() && cell.size() > widths[i]) cell = cell.substr(0, widths[i] - 1) + "~";
    line += i + 1 < cells.size() ? fmt::format("{:<{}} ", cell, widths[i]) : cell;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return out + line + "\n";
}

char LetterOf(size_t index) { return index < 26 ? static_cast<char>('A' + index) : '#'; }

// Wraps a list of phrases, breaking only between them ("4 devices x1" stays on one line).
std::vector<std::string> WrapPhrases(const std::vector<std::string>& phrases, size_t width,
                                     size_t indent) {
  constexpr char kJoin = '\x1f';
  std::string text;
  for (const std::string& phrase : phrases) {
    if (!text.empty()) text += ' ';
    std::string joined = phrase;
    std::replace(joined.begin(), joined.end(), ' ', kJoin);
    text += joined;
  }
  std::vector<std::string> lines = Wrap(text, width, indent);
  for (std::string& line : lines) std::replace(line.begin(), line.end(), kJoin, ' ');
  return lines;
}

std::string UnitsText(const HoldView& hold) {
  const int count = static_cast<int>(hold.ids.size());
  const bool core = hold.unit == "core";
  return fmt::format(
      "{} {} {}", count,
      topology::UnitName(core ? topology::Unit::kCore : topology::Unit::kDevice, count),
      topology::FormatIdRanges(hold.ids));
}

// How a node's devices are laid out to draw them: rows of `width` cells, and the word for it.
struct Layout {
  int width = 1;
  std::string shape;
};

Layout LayoutOf(const NodeView& node, const TypeView* type) {
  const int devices = node.devices;
  Layout layout{std::min(std::max(devices, 1), 16), "chain"};
  if (devices == 1) layout.shape = "single";
  if (type == nullptr) return layout;
  if (type->rule == "aligned") {
    for (int size : type->sizes) {
      if (size > 1 && devices % size == 0 && devices / size > 1) {
        layout.width = size;
        layout.shape = fmt::format("{}x{} torus", devices / size, size);
        return layout;
      }
    }
  } else if (type->rule == "any") {
    layout.shape = "all-to-all";
  } else if (devices > 2 && !type->adjacency.empty()) {
    const auto& first = type->adjacency.front();
    if (std::find(first.begin(), first.end(), devices - 1) != first.end()) layout.shape = "ring";
  }
  return layout;
}

// One letter per pod holding units on the node, in the order of the first device each holds
// (so the letters read left to right), for each hold.
std::vector<char> LettersOf(const NodeView& node, std::vector<std::string>& pods) {
  auto add = [&](const std::string& pod) {
    if (std::find(pods.begin(), pods.end(), pod) == pods.end()) pods.push_back(pod);
  };
  for (const UnitView& unit : node.units) {
    for (int h : unit.holds) add(node.holds[static_cast<size_t>(h)].pod);
  }
  for (const HoldView& hold : node.holds) add(hold.pod);
  std::vector<char> letters;
  for (const HoldView& hold : node.holds) {
    const auto index =
        static_cast<size_t>(std::find(pods.begin(), pods.end(), hold.pod) - pods.begin());
    letters.push_back(LetterOf(index));
  }
  return letters;
}

bool OutOfService(const NodeView& node, int device) {
  return std::find(node.out_of_service.begin(), node.out_of_service.end(), device) !=
         node.out_of_service.end();
}

// Per device: '.' free, the holder's letter (lower case when only some of its cores are used),
// '+' when several pods share it, 'x' out of service (failed) and held by none.
std::vector<std::string> Cells(const NodeView& node, const Layout& layout,
                               const std::vector<char>& letters) {
  std::string cells(static_cast<size_t>(node.devices), '.');
  for (const UnitView& unit : node.units) {
    std::set<char> holders;
    for (int h : unit.holds) holders.insert(letters[static_cast<size_t>(h)]);
    char& cell = cells[static_cast<size_t>(unit.device)];
    if (holders.size() > 1) {
      cell = '+';
    } else if (holders.size() == 1) {
      const bool whole = unit.cores_used >= node.cores_per_device;
      cell = whole ? *holders.begin() : static_cast<char>(std::tolower(*holders.begin()));
    } else if (unit.cores_used > 0) {
      cell = '?';
    }
  }
  // A failed device no pod holds (the extender counts its cores as taken: nothing may use them).
  for (const UnitView& unit : node.units) {
    if (unit.holds.empty() && OutOfService(node, unit.device)) {
      cells[static_cast<size_t>(unit.device)] = 'x';
    }
  }
  std::vector<std::string> rows;
  for (size_t i = 0; i < cells.size(); i += static_cast<size_t>(layout.width)) {
    rows.push_back(cells.substr(i, static_cast<size_t>(layout.width)));
  }
  return rows;
}

// Devices some pod uses (a failed device no pod holds is not used, only unusable).
int DevicesUsed(const NodeView& node) {
  return static_cast<int>(
      std::count_if(node.units.begin(), node.units.end(), [&node](const UnitView& u) {
        return u.cores_used > 0 && (!u.holds.empty() || !OutOfService(node, u.device));
      }));
}

std::vector<std::string> FreeSets(const NodeView& node) {
  std::vector<std::string> phrases = {"free legal sets:"};
  for (const auto& [request, sets] : node.free_sets) {
    if (sets > 0) phrases.push_back(fmt::format("{} x{},", request, sets));
  }
  if (phrases.size() == 1) phrases.push_back("none");
  if (phrases.back().ends_with(',')) phrases.back().pop_back();
  return phrases;
}

const std::vector<size_t> kNodeColumns = {20, 14, 3, 7, 32};

void AppendNodeText(std::string& out, const NodeView& node, const FleetView& fleet) {
  if (!node.managed_by.empty()) {
    out +=
        Row({node.name, node.instance_type, "", "", "managed by " + node.managed_by}, kNodeColumns);
    for (const auto& line : Wrap(node.not_offered, kTerminalWidth, 6)) out += "    " + line + "\n";
    return;
  }
  const Layout layout = LayoutOf(node, fleet.Type(node.instance_type));
  std::vector<std::string> pods;
  const std::vector<char> letters = LettersOf(node, pods);
  const std::vector<std::string> rows = Cells(node, layout, letters);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string units = rows[r];
    if (r == 0) units += "  " + layout.shape;
    if (r == 0) {
      out += Row({node.name, node.instance_type, node.lnc > 0 ? std::to_string(node.lnc) : "-",
                  fmt::format("{}/{}", DevicesUsed(node), node.devices), units},
                 kNodeColumns);
    } else {
      out += Row({"", "", "", "", units}, kNodeColumns);
    }
  }
  // The key: each pod's letter, then each of its containers' units.
  std::map<std::string, std::vector<const HoldView*>> by_pod;
  for (const HoldView& hold : node.holds) by_pod[hold.pod].push_back(&hold);
  for (size_t p = 0; p < pods.size(); ++p) {
    std::string text = fmt::format("{} {}", LetterOf(p), pods[p]);
    for (const HoldView* hold : by_pod[pods[p]]) {
      text += fmt::format(" {}: {}", hold->container, UnitsText(*hold));
      if (hold->state != "committed") text += " (" + hold->state + ")";
      if (hold->gang_seat) text += " (gang seat)";
    }
    for (const auto& line : Wrap(text, kTerminalWidth - 4, 4)) out += "    " + line + "\n";
  }
  if (!node.reserved_for_gang.empty()) {
    out += "    reserved for gang " + node.reserved_for_gang + "\n";
  }
  if (!node.out_of_service.empty()) {
    out += "    out of service (failed): devices " + topology::FormatIdRanges(node.out_of_service) +
           "\n";
  }
  for (const auto& line : WrapPhrases(FreeSets(node), kTerminalWidth - 4, 4)) {
    out += "    " + line + "\n";
  }
}

// The fleet as a whole: its size, the share allocated, and per request class the legal sets still
// free across it (the classes the scorer weighs: with --extender, those of the demand it has seen).
void AppendFleetText(std::string& out, const FleetView& fleet) {
  out += fmt::format("fleet: {} nodes, {} devices, {:.0f}% allocated\n", fleet.summary_nodes,
                     fleet.summary_devices, fleet.allocated_share * 100);
  std::vector<std::string> phrases = {"free legal sets fleet-wide:"};
  for (const ClassView& c : fleet.classes) {
    phrases.push_back(fmt::format("{} x{},", c.request, c.free_sets));
  }
  if (phrases.size() == 1) return;
  phrases.back().pop_back();
  for (const auto& line : WrapPhrases(phrases, kTerminalWidth - 4, 4)) out += "    " + line + "\n";
}

Json NodeJson(const NodeView& node, const FleetView& fleet) {
  Json out = {{"name", node.name}, {"instance_type", node.instance_type}};
  if (!node.managed_by.empty()) {
    out["managed_by"] = node.managed_by;
    out["not_offered"] = node.not_offered;
    return out;
  }
  const Layout layout = LayoutOf(node, fleet.Type(node.instance_type));
  std::vector<std::string> pods;
  const std::vector<char> letters = LettersOf(node, pods);
  out["lnc"] = node.lnc > 0 ? Json(node.lnc) : Json(nullptr);
  out["devices"] = node.devices;
  out["devices_used"] = DevicesUsed(node);
  out["shape"] = layout.shape;
  out["cells"] = Cells(node, layout, letters);
  Json holders = Json::array();
  for (size_t h = 0; h < node.holds.size(); ++h) {
    const HoldView& hold = node.holds[h];
    holders.push_back({{"letter", std::string(1, letters[h])},
                       {"pod", hold.pod},
                       {"container", hold.container},
                       {"unit", hold.unit},
                       {"ids", hold.ids},
                       {"state", hold.state},
                       {"gang_seat", hold.gang_seat}});
  }
  out["holders"] = std::move(holders);
  Json sets = Json::object();
  for (const auto& [request, count] : node.free_sets) sets[request] = count;
  out["free_sets"] = std::move(sets);
  if (!node.reserved_for_gang.empty()) out["reserved_for_gang"] = node.reserved_for_gang;
  if (!node.out_of_service.empty()) out["out_of_service"] = node.out_of_service;
  return out;
}

std::string RequestsText(const std::vector<RequestView>& requests) {
  std::string text;
  for (const RequestView& r : requests) {
    text += fmt::format("{}{} ({}{})", text.empty() ? "" : ", ", r.request, r.container,
                        r.init ? ", init" : "");
  }
  return text;
}

Json RequestsJson(const std::vector<RequestView>& requests) {
  Json out = Json::array();
  for (const RequestView& r : requests) {
    out.push_back({{"container", r.container}, {"init", r.init}, {"request", r.request}});
  }
  return out;
}

const std::vector<size_t> kPodColumns = {25, 16, 11, 13, 11};

// One pod: a line per container (the first with the pod's name, node and phase), then what did
// not fit its column in full: a long node name, a long request or id list, the extender's hold
// state when it is not committed, a record that cannot be read.
void AppendPodText(std::string& out, const PodRow& row) {
  std::vector<std::string> notes;
  if (row.node.size() > kPodColumns[1]) notes.push_back("node " + row.node);
  const size_t lines = std::max<size_t>({row.requests.size(), row.allocation.size(), 1});
  for (size_t i = 0; i < lines; ++i) {
    const RequestView* asked = i < row.requests.size() ? &row.requests[i] : nullptr;
    std::string request = asked != nullptr ? asked->request : "";
    std::string ids;
    if (i < row.allocation.size()) {
      const HoldView& c = row.allocation[i];
      ids = (c.unit == "core" ? "cores " : "") + topology::FormatIdRanges(c.ids);
    }
    const std::string full_request = request;
    if (lines > 1 && asked != nullptr) request = fmt::format("{}:{}", asked->container, request);
    if (request.size() > kPodColumns[2] || ids.size() > kPodColumns[3]) {
      notes.push_back(fmt::format("{}: {}{}", asked != nullptr ? asked->container : "ids",
                                  full_request, ids.empty() ? "" : " ids " + ids));
    }
    out += i == 0 ? Row({row.ns + "/" + row.name, row.node.empty() ? "-" : row.node, request,
                         ids.empty() ? "-" : ids, row.phase},
                        kPodColumns)
                  : Row({"", "", request, ids, ""}, kPodColumns);
  }
  if (!row.state.empty() && row.state != "committed") {
    notes.push_back("the extender's hold: " + row.state);
  }
  if (!row.error.empty()) notes.push_back("error: " + row.error);
  for (const std::string& note : notes) {
    for (const auto& line : Wrap(note, kTerminalWidth - 4, 4)) out += "    " + line + "\n";
  }
}

}  // namespace

std::vector<std::string> Wrap(std::string_view text, size_t width, size_t indent) {
  std::vector<std::string> lines;
  std::string line;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = std::min(text.find(' ', i), text.size());
    std::string_view word = text.substr(i, end - i);
    i = end + 1;
    while (!word.empty()) {
      const size_t lead = line.empty() ? (lines.empty() ? 0 : indent) : line.size() + 1;
      if (lead + word.size() <= width) {
        line += line.empty() ? std::string(lead, ' ') : " ";
        line += word;
        break;
      }
      if (!line.empty()) {
        lines.push_back(std::move(line));
        line.clear();
        continue;
      }
      // A word longer than a whole line (a long name): cut it.
      const size_t room = width > lead ? width - lead : 1;
      lines.push_back(std::string(lead, ' ') + std::string(word.substr(0, room)));
      word.remove_prefix(std::min(room, word.size()));
    }
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

std::string RenderNodes(const FleetView& fleet, const Rendering& how) {
  std::vector<const NodeView*> nodes;
  for (const NodeView& node : fleet.nodes) {
    if (node.error.empty()) nodes.push_back(&node);
  }
  if (how.json) {
    Json out = Header("NeuronNodeList", how);
    Json items = Json::array();
    for (const NodeView* node : nodes) items.push_back(NodeJson(*node, fleet));
    out["nodes"] = std::move(items);
    Json pending = Json::array();
    for (const PendingView& p : fleet.pending) pending.push_back(p.pod);
    out["pending"] = std::move(pending);
    Json classes = Json::array();
    for (const ClassView& c : fleet.classes) {
      classes.push_back({{"request", c.request}, {"free_sets", c.free_sets}});
    }
    out["summary"] = {{"nodes", fleet.summary_nodes},
                      {"devices", fleet.summary_devices},
                      {"allocated_share", fleet.allocated_share},
                      {"classes", std::move(classes)}};
    return Dump(out);
  }
  std::string out = Row({"NODE", "TYPE", "LNC", "USED", "DEVICES"}, kNodeColumns);
  for (const NodeView* node : nodes) AppendNodeText(out, *node, fleet);
  if (nodes.empty()) out += "(no Neuron nodes)\n";
  AppendFleetText(out, fleet);
  if (const size_t other = fleet.nodes.size() - nodes.size(); other > 0) {
    out += fmt::format("{} node(s) of types the catalog does not know are not shown\n", other);
  }
  for (const PendingView& p : fleet.pending) {
    const std::string text =
        fmt::format("pending: {} asks for {}", p.pod, RequestsText(p.requests));
    for (const auto& line : Wrap(text, kTerminalWidth, 4)) out += line + "\n";
  }
  if (!fleet.pending.empty()) out += "(kubectl neuron why NAMESPACE/NAME: why a pod waits)\n";
  return out;
}

std::vector<PodRow> PodRows(const std::vector<kube::Pod>& pods, std::string_view ns) {
  const claims::ResourceSet resources;
  std::vector<PodRow> rows;
  for (const kube::Pod& pod : pods) {
    if (!ns.empty() && pod.ns != ns) continue;
    auto asks = claims::ListAsks(pod, resources.Specs());
    const bool holds = !pod.node_name.empty() && claims::HasAllocation(pod);
    if ((!asks.ok() || asks->empty()) && !holds) continue;
    PodRow row;
    row.ns = pod.ns;
    row.name = pod.name;
    row.node = pod.node_name;
    row.phase = pod.deleting ? "Terminating" : pod.phase;
    if (asks.ok()) {
      for (const claims::ContainerAsk& ask : *asks) {
        row.requests.push_back(
            {ask.container, ask.init, topology::RequestLabel({ask.unit, ask.count})});
      }
    } else {
      row.error = asks.error();
    }
    if (holds) {
      if (auto record = claims::RecordFromPod(pod, resources.Specs()); record.ok()) {
        for (const claims::ContainerIds& c : record->containers) {
          const bool core = std::find(resources.core.begin(), resources.core.end(), c.resource) !=
                            resources.core.end();
          HoldView& held = row.allocation.emplace_back();
          held.container = c.container;
          held.unit = core ? "core" : "device";
          held.ids = c.ids;
        }
      } else {
        row.error = record.error();
      }
    }
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const PodRow& a, const PodRow& b) {
    return std::tie(a.ns, a.name) < std::tie(b.ns, b.name);
  });
  return rows;
}

std::string RenderPods(const std::vector<PodRow>& rows, const Rendering& how) {
  if (how.json) {
    Json out = Header("NeuronPodList", how);
    Json items = Json::array();
    for (const PodRow& row : rows) {
      Json allocation = Json::array();
      for (const HoldView& c : row.allocation) {
        allocation.push_back({{"container", c.container}, {"unit", c.unit}, {"ids", c.ids}});
      }
      Json item = {{"namespace", row.ns},
                   {"name", row.name},
                   {"node", row.node},
                   {"phase", row.phase},
                   {"requests", RequestsJson(row.requests)},
                   {"allocation", std::move(allocation)}};
      if (!row.state.empty()) item["state"] = row.state;
      if (!row.error.empty()) item["error"] = row.error;
      items.push_back(std::move(item));
    }
    out["pods"] = std::move(items);
    return Dump(out);
  }
  std::string out = Row({"NAMESPACE/NAME", "NODE", "REQUEST", "IDS", "PHASE"}, kPodColumns);
  for (const PodRow& row : rows) AppendPodText(out, row);
  if (rows.empty()) out += "(no pod asks for Neuron devices or cores)\n";
  return out;
}

std::string RenderWhy(const PodPlacementView& why, const Rendering& how) {
  if (how.json) {
    Json out = Header("NeuronPodWhy", how);
    out["pod"] = why.pod;
    out["requests"] = RequestsJson(why.requests);
    if (!why.gang.empty()) out["gang"] = why.gang;
    if (!why.node.empty()) {
      out["node"] = why.node;
      out["state"] = why.state;
      Json allocation = Json::array();
      for (const HoldView& c : why.allocation) {
        allocation.push_back({{"container", c.container}, {"unit", c.unit}, {"ids", c.ids}});
      }
      out["allocation"] = std::move(allocation);
      return Dump(out);
    }
    out["nodes_that_fit"] = why.nodes_that_fit;
    Json nodes = Json::array();
    for (const NodeWhyView& n : why.nodes) {
      nodes.push_back({{"node", n.node},
                       {"instance_type", n.instance_type},
                       {"kind", n.kind},
                       {"reason", n.reason}});
    }
    out["nodes"] = std::move(nodes);
    return Dump(out);
  }
  std::string out;
  auto say = [&](const std::string& text, size_t indent) {
    for (const auto& line : Wrap(text, kTerminalWidth - indent, 2)) {
      out += std::string(indent, ' ') + line + "\n";
    }
  };
  say(fmt::format("pod {} asks for {}{}", why.pod, RequestsText(why.requests),
                  why.gang.empty() ? "" : ", in gang " + why.gang),
      0);
  if (!why.node.empty()) {
    for (const HoldView& c : why.allocation) {
      say(fmt::format("holds {} on node {} ({}: {})", UnitsText(c), why.node, c.container,
                      why.state),
          0);
    }
    return out;
  }
  say(fmt::format("{} of {} Neuron nodes fit it now (from {})", why.nodes_that_fit,
                  why.nodes.size(), how.source),
      0);
  const std::vector<size_t> widths = {20, 14, 44};
  out += Row({"NODE", "TYPE", "WHY"}, widths);
  for (const NodeWhyView& n : why.nodes) {
    out += Row({n.node, n.instance_type, n.kind}, widths);
    if (!n.reason.empty()) say(n.reason, 4);
  }
  return out;
}

}  // namespace toposched::kubectl
