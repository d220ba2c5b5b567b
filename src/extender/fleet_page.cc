// The fleet page (docs/observability.md, "The fleet page"): the fleet view drawn for a browser.
// Rendered here, whole, as one HTML document: no script it needs, no font, no file from anywhere
// else (clusters are often offline), so what the extender knows is all it takes to show it. Nodes
// are drawn by draw::NodeSvg, the simulator report's drawing; hovering a core names its pod, and
// clicking it shows the pod (?pod=NS/NAME) with every other pod pale.
#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "draw/html.h"
#include "draw/line_chart.h"
#include "draw/node_svg.h"
#include "extender/fleet_reads.h"
#include "extender/fleet_state.h"
#include "extender/service.h"
#include "net/url_query.h"
#include "topology/id_ranges.h"

namespace toposched::extender {
namespace {

using draw::HtmlEscape;

constexpr std::string_view kPale = "#cfcfcf";

constexpr std::string_view kStyle = R"(
body{font-family:system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
td.n{text-align:right}.muted{color:#666}.kind{font-family:monospace}
form{margin:8px 0}.nodes{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:0;border:1px solid #ddd;border-radius:4px;padding:2px}
figcaption{font-size:11px;color:#444;max-width:260px;padding:0 6px 4px}
.focus{background:#fff7d6;border:1px solid #e0c060;padding:6px 10px;margin:8px 0}
.charts{display:flex;flex-wrap:wrap;gap:10px}.charts figcaption{font-size:13px;max-width:none}
.legend{font-size:11px}.legend span{margin-right:10px}
.legend i{display:inline-block;width:12px;height:4px;margin:0 4px 3px 0}
)";

// Written on load so that a test (and a curious operator) can read how long the page took.
constexpr std::string_view kTiming =
    "<script>addEventListener('load',function(){document.body.dataset.renderedMs="
    "String(Math.round(performance.now()));});</script>\n";

std::string PodLink(std::string_view key) { return "fleet?pod=" + net::UrlEncode(key); }

// A colour per pod, by the order pods first appear on the page (nodes by name, holds by uid):
// neighbours get clearly different hues, and the same state draws the same colours.
class Palette {
 public:
  std::string For(const std::string& key) {
    auto [it, added] = index_.emplace(key, static_cast<int>(index_.size()));
    return draw::OwnerColour(it->second);
  }

 private:
  std::map<std::string, int> index_;
};

// The node as draw::NodeSvg wants it: each core's owner, one owner per container hold.
std::string NodeFigure(const tracker::NodeView& node, const topology::SlotCosts& costs,
                       NodeFreeMemo& free, std::string_view highlight, Palette& palette) {
  const topology::NodeShape& shape = *node.shape;
  draw::NodePicture picture;
  picture.name = node.info.name;
  picture.type = shape.type;
  picture.devices = shape.devices;
  picture.cores_per_device = shape.cores_per_device;
  picture.core_owner.assign(static_cast<size_t>(shape.cores), -1);
  std::vector<draw::Owner> owners;
  for (const auto& holder : node.holders) {
    const std::string& key = holder.pod_name;
    const bool pale = !highlight.empty() && key != highlight;
    for (const auto& c : holder.containers) {
      const int index = static_cast<int>(owners.size());
      owners.push_back({key,
                        fmt::format("{} ({}, {}{})", key, c.container, HoldStateName(holder.state),
                                    holder.gang_seat ? ", gang seat" : ""),
                        pale ? std::string(kPale) : palette.For(key),
                        holder.gang_seat ? std::string() : PodLink(key)});
      const topology::CoreBits cores = topology::CoresOf(shape, c.placement);
      for (size_t core = 0; core < picture.core_owner.size(); ++core) {
        if (cores.test(core)) picture.core_owner[core] = index;
      }
    }
  }
  const int free_devices = std::popcount(shape.AllDevices() & ~node.usage.busy_devices());
  picture.marked_devices = topology::MaskToIds(node.usage.out_of_service());
  picture.caption = fmt::format(
      "{}{} · {}/{} devices free{}", node.info.instance_type,
      shape.type != nullptr && shape.type->has_lnc ? fmt::format(" · LNC {}", shape.lnc)
                                                   : std::string(),
      free_devices, shape.devices,
      picture.marked_devices.empty()
          ? std::string()
          : fmt::format(" · out of service: {}", topology::FormatIdRanges(picture.marked_devices)));
  std::string sets;
  const NodeFreeMemo::Answer& free_now = free.Of(shape, node.usage);
  const auto& free_sets = free_now.sets;
  for (size_t c = 0; c < free_sets.size(); ++c) {
    if (!free_sets[c]) continue;
    fmt::format_to(std::back_inserter(sets), "{}{}: {}", sets.empty() ? "" : ", ",
                   topology::RequestLabel(costs.classes[c]), *free_sets[c]);
  }
  const double fragmentation = free_now.fragmentation;
  return fmt::format(
      "<figure>{}<figcaption>free sets: {}<br>fragmentation {:.2f} devices{}</figcaption>"
      "</figure>\n",
      draw::NodeSvg(picture, owners), sets.empty() ? "none" : HtmlEscape(sets),
      std::isfinite(fragmentation) ? fragmentation : 0.0,
      node.gang.empty() ? std::string() : " · reserved for gang " + HtmlEscape(node.gang));
}

std::string Filters(const FleetState& state, const FleetQuery& query,
                    const std::vector<std::string>& all_types) {
  std::string out =
      "<form method=\"get\" action=\"fleet\">instance type <select name=\"type\">"
      "<option value=\"\">all</option>";
  for (const auto& type : all_types) {
    fmt::format_to(std::back_inserter(out), "<option{}>{}</option>",
                   type == query.instance_type ? " selected" : "", HtmlEscape(type));
  }
  fmt::format_to(std::back_inserter(out),
                 "</select> node <input name=\"node\" value=\"{}\" size=\"24\" "
                 "placeholder=\"all\"> <button>show</button> <a href=\"fleet\">everything</a> "
                 "<span class=\"muted\">{} nodes shown</span></form>\n",
                 HtmlEscape(query.node), state.views.size() + state.not_offered.size());
  return out;
}

std::string PendingTable(const FleetState& state) {
  std::string out =
      fmt::format("<h2 id=\"pending\">Pending pods ({})</h2>\n", state.pending.size());
  if (state.pending.empty()) return out + "<p class=\"muted\">none</p>\n";
  out +=
      "<table><tr><th>pod</th><th>asks</th><th>why it waits (nodes; filter's words on "
      "one)</th></tr>\n";
  for (const PendingPod& p : state.pending) {
    const std::string key = p.pod.ns + "/" + p.pod.name;
    std::string asks;
    for (const auto& c : p.pod.spec.containers) {
      if (c.init) continue;
      asks += (asks.empty() ? "" : ", ") + topology::RequestLabel(c.request);
    }
    std::string why;
    if (!p.explained) why = "<span class=\"muted\">not explained (raise ?explain=)</span>";
    for (const auto& [kind, example] : p.kinds) {
      if (kind == "fits") {
        // The extender sees the Neuron request only: a node selector, taints or CPU may still
        // keep the pod off these nodes (kube-scheduler's own event says so).
        fmt::format_to(std::back_inserter(why),
                       "<div data-kind=\"fits\"><span class=\"kind\">fits</span>: {} node{}, "
                       "e.g. {} (by its Neuron request; kube-scheduler's own filters decide "
                       "there)</div>",
                       example.nodes, example.nodes == 1 ? "" : "s", HtmlEscape(example.node));
        continue;
      }
      fmt::format_to(std::back_inserter(why),
                     "<div data-kind=\"{0}\"><span class=\"kind\">{0}</span>: {1} node{2}; "
                     "{3}: {4}</div>",
                     HtmlEscape(kind), example.nodes, example.nodes == 1 ? "" : "s",
                     HtmlEscape(example.node), HtmlEscape(example.reason));
    }
    fmt::format_to(std::back_inserter(out),
                   "<tr class=\"pending\" data-pod=\"{0}\"><td><a href=\"{1}\">{0}</a>{2}</td>"
                   "<td>{3}</td><td>{4}</td></tr>\n",
                   HtmlEscape(key), HtmlEscape(PodLink(key)),
                   p.pod.gang
                       ? " <span class=\"muted\">gang " + HtmlEscape(p.pod.gang->id) + "</span>"
                       : std::string(),
                   HtmlEscape(asks), why);
  }
  return out + "</table>\n";
}

std::string ClassesTable(const FleetState& state) {
  std::string out =
      "<h2>Request classes</h2>\n<table><tr><th>request</th><th>share of demand</th>"
      "<th>free legal sets</th><th>cost per set (scarcity)</th></tr>\n";
  const auto& c = state.costs;
  for (size_t i = 0; i < c.classes.size(); ++i) {
    fmt::format_to(
        std::back_inserter(out),
        "<tr><td>{}</td><td class=\"n\">{:.1f}%</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{:.3g}</td></tr>\n",
        topology::RequestLabel(c.classes[i]), 100.0 * (i < c.shares.size() ? c.shares[i] : 0.0),
        i < state.supply.size() ? state.supply[i] : 0, i < c.per_slot.size() ? c.per_slot[i] : 0.0);
  }
  return out + "</table>\n";
}

// "Nodes 501-1000 of 5000", with links to the pages before and after (the filters kept).
std::string PageLinks(const FleetQuery& query, size_t first, size_t last, size_t total) {
  auto link = [&](size_t from, std::string_view text) {
    std::string href = fmt::format("fleet?from={}&count={}", from, query.max_nodes);
    if (!query.instance_type.empty()) href += "&type=" + net::UrlEncode(query.instance_type);
    if (!query.node.empty()) href += "&node=" + net::UrlEncode(query.node);
    return fmt::format(" <a href=\"{}\">{}</a>", HtmlEscape(href), text);
  };
  std::string out = fmt::format("<p id=\"pages\">nodes {}-{} of {}", first + 1, last, total);
  const auto count = static_cast<size_t>(query.max_nodes);
  if (first > 0) out += link(first > count ? first - count : 0, "previous");
  if (last < total) out += link(last, "next");
  return out + "</p>\n";
}

// Where the highlighted pod is, or why it waits.
std::string Focus(const FleetState& state, std::string_view pod) {
  for (const auto& node : state.views) {
    for (const auto& holder : node.holders) {
      if (holder.pod_name != pod) continue;
      std::string where;
      for (const auto& c : holder.containers) {
        fmt::format_to(std::back_inserter(where), "{}{}: {} {}", where.empty() ? "" : "; ",
                       HtmlEscape(c.container),
                       c.placement.unit == topology::Unit::kDevice ? "devices" : "cores",
                       topology::FormatIdRanges(c.placement.ids));
      }
      return fmt::format(
          "<div class=\"focus\" data-focus=\"{}\"><b>{}</b> on <b>{}</b> ({}): "
          "{}</div>\n",
          HtmlEscape(pod), HtmlEscape(pod), HtmlEscape(node.info.name), HoldStateName(holder.state),
          where);
    }
  }
  for (const PendingPod& p : state.pending) {
    if (p.pod.ns + "/" + p.pod.name != pod) continue;
    return fmt::format(
        "<div class=\"focus\" data-focus=\"{0}\"><b>{0}</b> is pending: "
        "<a href=\"#pending\">why</a></div>\n",
        HtmlEscape(pod));
  }
  return fmt::format(
      "<div class=\"focus\">{} holds nothing on the nodes shown and is not "
      "pending</div>\n",
      HtmlEscape(pod));
}

// The last hours from the fleet history (fleet_history.h): allocation per instance type,
// fragmentation, free legal sets per request class (what the scorer protects) and pending pods
// by the kind of their wait, each over minutes before the newest sample.
std::string HistoryCharts(std::span<const FleetSample> samples) {
  std::string out = "<h2 id=\"history\">The last hours</h2>\n";
  if (samples.size() < 2) {
    return out + "<p class=\"muted\">Not enough samples yet (one every --history-interval).</p>\n";
  }
  const int64_t now = samples.back().time;
  auto minutes = [&](const FleetSample& s) { return static_cast<double>(s.time - now) / 60.0; };
  draw::ChartAxes axes;
  axes.x_label = "minutes before the newest sample";
  axes.x_min = minutes(samples.front());
  axes.x_max = 0;
  axes.width = 560;
  axes.height = 220;
  auto chart = [&](std::string_view title, const std::vector<draw::Series>& series, bool percent) {
    draw::ChartAxes a = axes;
    a.percent = percent;
    std::string legend;
    for (const auto& s : series) {
      fmt::format_to(std::back_inserter(legend), "<span><i style=\"background:{}\"></i>{}</span> ",
                     HtmlEscape(s.colour), HtmlEscape(s.name));
    }
    return fmt::format(
        "<figure class=\"chart\"><figcaption>{}</figcaption><div class=\"legend\">{}"
        "</div>{}</figure>\n",
        HtmlEscape(title), legend, draw::LineChart(series, a));
  };
  // Allocated share: the fleet, and each instance type.
  std::vector<draw::Series> allocated{{"fleet", "#222", {}}};
  std::map<std::string, size_t> type_line;
  for (const auto& s : samples) {
    allocated[0].points.emplace_back(minutes(s), s.allocated_share);
    for (const auto& t : s.types) {
      auto [it, added] = type_line.emplace(t.instance_type, allocated.size());
      if (added) {
        allocated.push_back({t.instance_type, draw::OwnerColour(static_cast<int>(it->second)), {}});
      }
      if (t.devices > 0) {
        allocated[it->second].points.emplace_back(
            minutes(s), t.allocated_devices / static_cast<double>(t.devices));
      }
    }
  }
  std::vector<draw::Series> fragmentation{{"fleet (devices)", "#b15928", {}}};
  for (const auto& s : samples) fragmentation[0].points.emplace_back(minutes(s), s.fragmentation);
  // Free legal sets per class, by the class's label (the classes can change between samples).
  std::vector<draw::Series> sets;
  std::map<std::string, size_t> class_line;
  for (const auto& s : samples) {
    for (const auto& c : s.classes) {
      auto [it, added] = class_line.emplace(c.request, sets.size());
      if (added) sets.push_back({c.request, draw::OwnerColour(static_cast<int>(it->second)), {}});
      sets[it->second].points.emplace_back(minutes(s), static_cast<double>(c.free_sets));
    }
  }
  std::vector<draw::Series> pending;
  for (size_t k = 0; k < kWhyKinds.size(); ++k) {
    pending.push_back({std::string(kWhyKinds[k]), draw::OwnerColour(static_cast<int>(k)), {}});
    for (const auto& s : samples) {
      pending.back().points.emplace_back(minutes(s), static_cast<double>(s.pending_by_kind[k]));
    }
  }
  out += "<div class=\"charts\">\n";
  out += chart("allocated share of the devices", allocated, true);
  out += chart("fragmentation", fragmentation, false);
  out += chart("free legal sets per request class (fewer: scarcer)", sets, false);
  out += chart("pending pods by the kind of their wait", pending, false);
  return out + "</div>\n";
}

}  // namespace

std::string ExtenderService::FleetPage(const FleetQuery& query, std::string_view highlight_pod,
                                       std::span<const FleetSample> history) const {
  const FleetState state = CollectFleet(query);
  std::vector<std::string> all_types;
  for (const auto& [name, type] : catalog_.types()) all_types.push_back(name);
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width\">"
      "{}<title>toposched fleet</title><style>{}</style>\n{}</head><body>\n"
      "<h1>toposched fleet</h1>\n<div id=\"summary\">{} Neuron nodes, {} devices, {:.1f}% "
      "allocated, {} pending pods · policy {}{}</div>\n",
      query.refresh_seconds > 0
          ? fmt::format("<meta http-equiv=\"refresh\" content=\"{}\">", query.refresh_seconds)
          : std::string(),
      kStyle, kTiming, state.views.size() + state.not_offered.size(), state.devices,
      100.0 * state.allocated_share, state.pending.size(), topology::PolicyName(options_.policy),
      Ready() ? "" : " · <b>not ready: first sync not done</b>");
  out += Filters(state, query, all_types);
  if (!highlight_pod.empty()) out += Focus(state, highlight_pod);
  out += PendingTable(state);
  out += ClassesTable(state);
  out +=
      "<h2>Nodes</h2>\n<p class=\"muted\">Each node drawn as its topology, a box per device "
      "split into its cores; a colour per pod (hover for it, click to show it alone), grey is "
      "free.</p>\n<div class=\"nodes\">\n";
  Palette palette;
  NodeFreeMemo free(state.costs);
  const size_t first = std::min(static_cast<size_t>(query.first_node), state.views.size());
  const size_t last = std::min(first + static_cast<size_t>(query.max_nodes), state.views.size());
  if (first > 0 || last < state.views.size()) {
    out += PageLinks(query, first, last, state.views.size());
  }
  for (const auto& view : std::span(state.views).subspan(first, last - first)) {
    if (view.shape) {
      out += NodeFigure(view, state.costs, free, highlight_pod, palette);
    } else {
      fmt::format_to(std::back_inserter(out),
                     "<figure><b>{}</b><figcaption>{}</figcaption></figure>\n",
                     HtmlEscape(view.info.name), HtmlEscape(view.error));
    }
  }
  out += "</div>\n";
  if (!state.not_offered.empty()) {
    out += "<h2>Nodes the DRA driver manages</h2>\n<table>\n";
    for (const auto& [name, reason] : state.not_offered) {
      fmt::format_to(std::back_inserter(out), "<tr><td>{}</td><td>{}</td></tr>\n", HtmlEscape(name),
                     HtmlEscape(reason));
    }
    out += "</table>\n";
  }
  out += HistoryCharts(history);
  out += "</body></html>\n";
  return out;
}

}  // namespace toposched::extender
