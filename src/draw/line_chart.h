// Values over time as an SVG line chart: the simulator's report (allocation per policy over a
// replay) and the extender's fleet page (allocation, fragmentation, scarcity over the last hours).
#ifndef TOPOSCHED_DRAW_LINE_CHART_H_
#define TOPOSCHED_DRAW_LINE_CHART_H_

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace toposched::draw {

struct Series {
  std::string name;  // hover text
  std::string colour;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct ChartAxes {
  bool percent = false;  // y is a share in [0, 1], labelled in %
  std::string x_label;
  double x_min = 0;
  double x_max = 1;
  int width = 900;
  int height = 280;
};

// Each line is a step function that keeps the highest value in each pixel column, so short peaks
// stay visible. Points outside [x_min, x_max] are left out; y runs from 0 to the highest value
// shown (1 for a share).
std::string LineChart(std::span<const Series> series, const ChartAxes& axes);

// A round step for about `target` ticks over `range`.
double NiceStep(double range, int target);

}  // namespace toposched::draw

#endif  // TOPOSCHED_DRAW_LINE_CHART_H_
