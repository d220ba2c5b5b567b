#include "draw/node_svg.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numbers>

#include <fmt/format.h>

#include "draw/html.h"

namespace toposched::draw {
namespace {

constexpr int kBox = 26;   // a device's box
constexpr int kGap = 12;   // between boxes: room for the links
constexpr int kPad = 6;    // around the drawing
constexpr int kHead = 34;  // the name and the caption above it

struct Point {
  double x = 0;
  double y = 0;
};

// Each device's centre, relative to the drawing's top left corner, and the drawing's size.
struct Positions {
  std::vector<Point> centre;
  double width = 0;
  double height = 0;
};

Positions Place(const DeviceLayout& layout, int devices) {
  Positions out;
  const double step = kBox + kGap;
  if (layout.layout == Layout::kRing) {
    const double radius = std::max<double>(kBox, devices * step / (2 * std::numbers::pi));
    const double middle = radius + kBox / 2.0;
    for (int d = 0; d < devices; ++d) {
      // Device 0 at the top, then clockwise.
      const double angle = -std::numbers::pi / 2 + 2 * std::numbers::pi * d / devices;
      out.centre.push_back({middle + radius * std::cos(angle), middle + radius * std::sin(angle)});
    }
    out.width = out.height = 2 * middle;
    return out;
  }
  const int columns =
      layout.layout == Layout::kGrid ? std::max(layout.columns, 1) : std::max(devices, 1);
  const int rows = (devices + columns - 1) / columns;
  for (int d = 0; d < devices; ++d) {
    const int row = d / columns;  // whole rows above this device
    out.centre.push_back({kBox / 2.0 + (d % columns) * step, kBox / 2.0 + row * step});
  }
  out.width = columns * step - kGap;
  out.height = std::max(rows, 1) * step - kGap;
  return out;
}

// The links between devices the catalog names. A torus's wrap-around links are drawn as short
// stubs leaving the grid, so the grid stays readable; a chain draws only its neighbours.
void AppendLinks(std::string& svg, const topology::InstanceType& type, const DeviceLayout& layout,
                 const Positions& at, Point origin) {
  const int n = static_cast<int>(at.centre.size());
  // One path for every link: a 500-node page draws 20,000 of them.
  std::string path;
  auto line = [&](Point a, Point b) {
    fmt::format_to(std::back_inserter(path), "M{:.1f} {:.1f}L{:.1f} {:.1f}", origin.x + a.x,
                   origin.y + a.y, origin.x + b.x, origin.y + b.y);
  };
  for (int a = 0; a < n && a < static_cast<int>(type.adjacency.size()); ++a) {
    for (int b : type.adjacency[static_cast<size_t>(a)]) {
      if (b <= a || b >= n) continue;
      const Point pa = at.centre[static_cast<size_t>(a)];
      const Point pb = at.centre[static_cast<size_t>(b)];
      if (layout.layout == Layout::kRow && b - a != 1) continue;
      const bool same_row =
          layout.layout == Layout::kGrid && a / layout.columns == b / layout.columns;
      const bool same_column =
          layout.layout == Layout::kGrid && a % layout.columns == b % layout.columns;
      const bool wraps = layout.layout == Layout::kGrid &&
                         ((same_row && b - a > 1) || (same_column && (b - a) / layout.columns > 1));
      if (!wraps) {
        line(pa, pb);
        continue;
      }
      // A stub out of each end, away from the other.
      const double dx = pb.x > pa.x ? 1 : (pb.x < pa.x ? -1 : 0);
      const double dy = pb.y > pa.y ? 1 : (pb.y < pa.y ? -1 : 0);
      const double reach = kBox / 2.0 + kGap / 2.0;
      line(pa, {pa.x - dx * reach, pa.y - dy * reach});
      line(pb, {pb.x + dx * reach, pb.y + dy * reach});
    }
  }
  if (!path.empty()) {
    svg += "<path class=\"links\" stroke=\"#999\" stroke-width=\"2\" d=\"" + path + "\"/>";
  }
}

// What a node's devices add besides their cores: drawn once per node, not once per device, so a
// 500-node page stays light for the browser.
struct DeviceMarks {
  std::string outlines;  // path data
  std::string labels;    // <text> elements
  std::string crosses;   // path data
};

// One device's box: its cores in runs of the same owner, a link and hover text per run.
void AppendDevice(std::string& svg, DeviceMarks& marks, const NodePicture& node,
                  std::span<const Owner> owners, int d, Point centre) {
  const int per = std::max(node.cores_per_device, 1);
  const double x0 = centre.x - kBox / 2.0;
  const double y0 = centre.y - kBox / 2.0;
  const double core_width = static_cast<double>(kBox) / per;
  auto owner_of = [&](int core) {
    const auto c = static_cast<size_t>(core);
    const int o = c < node.core_owner.size() ? node.core_owner[c] : -1;
    return o >= 0 && static_cast<size_t>(o) < owners.size() ? o : -1;
  };
  for (int k = 0; k < per;) {
    const int first = d * per + k;
    const int owner = owner_of(first);
    int end = k + 1;
    while (end < per && owner_of(d * per + end) == owner) ++end;
    const int last = d * per + end - 1;
    const std::string cores =
        first == last ? fmt::format("core {}", first) : fmt::format("cores {}-{}", first, last);
    const Owner* o = owner >= 0 ? &owners[static_cast<size_t>(owner)] : nullptr;
    if (o != nullptr && !o->href.empty()) {
      svg += "<a href=\"" + HtmlEscape(o->href) + "\">";
    }
    fmt::format_to(std::back_inserter(svg),
                   "<rect class=\"core\" data-device=\"{}\" data-cores=\"{}-{}\" data-owner=\"{}\" "
                   "x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\">"
                   "<title>device {} {}: {}</title></rect>",
                   d, first, last, o != nullptr ? HtmlEscape(o->key) : std::string(),
                   x0 + k * core_width, y0, (end - k) * core_width, kBox,
                   o != nullptr ? HtmlEscape(o->colour) : std::string(kFreeColour), d, cores,
                   o != nullptr ? HtmlEscape(o->name) : std::string("free"));
    if (o != nullptr && !o->href.empty()) svg += "</a>";
    k = end;
  }
  fmt::format_to(std::back_inserter(marks.outlines), "M{:.1f} {:.1f}h{}v{}h-{}z", x0, y0, kBox,
                 kBox, kBox);
  fmt::format_to(std::back_inserter(marks.labels), "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>",
                 centre.x, centre.y + 3, d);
  if (std::find(node.marked_devices.begin(), node.marked_devices.end(), d) !=
      node.marked_devices.end()) {
    fmt::format_to(std::back_inserter(marks.crosses),
                   "M{0:.1f} {1:.1f}L{2:.1f} {3:.1f}M{2:.1f} "
                   "{1:.1f}L{0:.1f} {3:.1f}",
                   x0, y0, x0 + kBox, y0 + kBox);
  }
}

}  // namespace

DeviceLayout LayoutOf(const topology::InstanceType* type, int devices) {
  if (type == nullptr || type->devices != devices || devices < 3) return {};
  const auto& adjacency = type->adjacency;
  if (type->rule == topology::LegalSetRule::kContiguous) {
    const bool ring = !adjacency.empty() &&
                      std::find(adjacency.front().begin(), adjacency.front().end(), devices - 1) !=
                          adjacency.front().end();
    return {ring ? Layout::kRing : Layout::kRow, 0};
  }
  // Rows of the aligned size nearest the square root (4 of 16), or a near-square grid.
  const int root = static_cast<int>(std::lround(std::sqrt(devices)));
  int columns = root;
  if (type->rule == topology::LegalSetRule::kAligned && !type->sizes.empty()) {
    columns = *std::min_element(type->sizes.begin(), type->sizes.end(), [&](int a, int b) {
      return std::abs(a - root) < std::abs(b - root);
    });
  }
  if (columns <= 1 || columns >= devices) return {};
  return {Layout::kGrid, columns};
}

std::string NodeSvg(const NodePicture& node, std::span<const Owner> owners) {
  const DeviceLayout layout = LayoutOf(node.type, node.devices);
  const Positions at = Place(layout, node.devices);
  const double label_width =
      7.0 * static_cast<double>(std::max(node.name.size(), node.caption.size()));
  const double width = std::max(at.width, label_width) + 2 * kPad;
  const double height = at.height + kHead + 2 * kPad;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"node\" data-node=\"{}\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\">"
      "<text x=\"{}\" y=\"{}\" font-size=\"12\" font-weight=\"bold\">{}</text>"
      "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\">{}</text>",
      HtmlEscape(node.name), width, height, width, height, kPad, kPad + 11, HtmlEscape(node.name),
      kPad, kPad + 25, HtmlEscape(node.caption));
  const Point origin{kPad, kPad + kHead};
  if (node.type != nullptr) AppendLinks(svg, *node.type, layout, at, origin);
  DeviceMarks marks;
  for (int d = 0; d < node.devices; ++d) {
    const Point c = at.centre[static_cast<size_t>(d)];
    AppendDevice(svg, marks, node, owners, d, {origin.x + c.x, origin.y + c.y});
  }
  svg += "<path fill=\"none\" stroke=\"#555\" pointer-events=\"none\" d=\"" + marks.outlines +
         "\"/><g font-size=\"9\" text-anchor=\"middle\" pointer-events=\"none\" stroke=\"#fff\" "
         "stroke-width=\"2\" paint-order=\"stroke\">" +
         marks.labels + "</g>";
  if (!marks.crosses.empty()) {
    svg +=
        "<path class=\"marked\" stroke=\"#c00\" stroke-width=\"2\" d=\"" + marks.crosses + "\"/>";
  }
  svg += "</svg>";
  return svg;
}

std::string OwnerColour(int index) {
  if (index < 0) return std::string(kFreeColour);
  const int hue = static_cast<int>(std::fmod(index * 137.508, 360.0));
  return fmt::format("hsl({},62%,{}%)", hue, 48 + index % 3 * 8);
}

}  // namespace toposched::draw
