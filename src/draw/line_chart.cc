#include "draw/line_chart.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "draw/html.h"

namespace toposched::draw {

double NiceStep(double range, int target) {
  if (range <= 0) return 1;
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * magnitude) return m * magnitude;
  }
  return 10 * magnitude;
}

std::string LineChart(std::span<const Series> series, const ChartAxes& axes) {
  constexpr int kLeft = 56;
  constexpr int kRight = 16;
  constexpr int kTop = 14;
  constexpr int kBottom = 42;
  const int plot_width = std::max(axes.width - kLeft - kRight, 10);
  const int plot_height = std::max(axes.height - kTop - kBottom, 10);
  const double x_span = axes.x_max > axes.x_min ? axes.x_max - axes.x_min : 1.0;
  double y_max = axes.percent ? 1.0 : 0.0;  // counts: up to the highest one shown
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (x >= axes.x_min && x <= axes.x_max && std::isfinite(y)) y_max = std::max(y_max, y);
    }
  }
  if (y_max <= 0) y_max = 1;
  auto px = [&](double x) { return kLeft + (x - axes.x_min) / x_span * plot_width; };
  auto py = [&](double y) { return kTop + (1.0 - y / y_max) * plot_height; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\">\n",
      axes.width, axes.height, axes.width, axes.height);
  const double y_step = axes.percent ? 0.25 : NiceStep(y_max, 5);
  for (double y = 0; y <= y_max + 1e-9; y += y_step) {
    const std::string label = axes.percent ? fmt::format("{:g}%", 100 * y) : fmt::format("{:g}", y);
    fmt::format_to(std::back_inserter(svg),
                   "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                   "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"11\">{}</text>\n",
                   kLeft, py(y), kLeft + plot_width, py(y), kLeft - 6, py(y) + 4, label);
  }
  const double x_step = NiceStep(x_span, 8);
  for (double x = std::ceil(axes.x_min / x_step) * x_step; x <= axes.x_max + 1e-9; x += x_step) {
    fmt::format_to(
        std::back_inserter(svg),
        "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#999\"/>"
        "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{:g}</text>\n",
        px(x), kTop + plot_height, px(x), kTop + plot_height + 5, px(x), kTop + plot_height + 18,
        std::abs(x) < 1e-9 ? 0.0 : x);
  }
  fmt::format_to(std::back_inserter(svg),
                 "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n",
                 kLeft + plot_width / 2, axes.height - 6, HtmlEscape(axes.x_label));
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    std::vector<double> column(static_cast<size_t>(plot_width) + 1, -1.0);
    int first_column = plot_width + 1;
    int last_column = -1;
    for (const auto& [x, y] : s.points) {
      if (x < axes.x_min || x > axes.x_max || !std::isfinite(y)) continue;
      const int c =
          std::clamp(static_cast<int>((x - axes.x_min) / x_span * plot_width), 0, plot_width);
      column[static_cast<size_t>(c)] = std::max(column[static_cast<size_t>(c)], y);
      first_column = std::min(first_column, c);
      last_column = std::max(last_column, c);
    }
    if (last_column < 0) continue;
    std::string points;
    double last = 0;
    for (int c = first_column; c <= last_column; ++c) {
      double y = column[static_cast<size_t>(c)];
      if (y < 0) y = last;  // a step function: no event, no change
      last = y;
      fmt::format_to(std::back_inserter(points), "{} {:.1f} ", kLeft + c, py(y));
    }
    fmt::format_to(std::back_inserter(svg),
                   "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.4\" points=\"{}\">"
                   "<title>{}</title></polyline>\n",
                   HtmlEscape(s.colour), points, HtmlEscape(s.name));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace toposched::draw
