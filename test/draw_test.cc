// How nodes are drawn (draw/node_svg.h): the layout comes from the catalog's rule and adjacency,
// each core carries its owner, runs of one owner are one box, and text is escaped.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "draw/html.h"
#include "draw/line_chart.h"
#include "draw/node_svg.h"
#include "topology/catalog.h"

namespace toposched::draw {
namespace {

using ::testing::HasSubstr;

const topology::InstanceType& Type(const std::string& name) {
  const topology::InstanceType* type = topology::Catalog::Embedded().Find(name);
  EXPECT_NE(type, nullptr) << name;
  return *type;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(DrawTest, LayoutFollowsTheCatalog) {
  EXPECT_EQ(LayoutOf(&Type("inf2.48xlarge"), 12).layout, Layout::kRing);
  EXPECT_EQ(LayoutOf(&Type("inf2.24xlarge"), 6).layout, Layout::kRow);  // a chain, no wrap
  const DeviceLayout trn = LayoutOf(&Type("trn1.32xlarge"), 16);
  EXPECT_EQ(trn.layout, Layout::kGrid);
  EXPECT_EQ(trn.columns, 4);
  EXPECT_EQ(LayoutOf(&Type("trn2.48xlarge"), 16).columns, 4);
  // A pool or a count that differs from the type's: a plain row.
  EXPECT_EQ(LayoutOf(&Type("trn2.48xlarge"), 32).layout, Layout::kRow);
  EXPECT_EQ(LayoutOf(nullptr, 8).layout, Layout::kRow);
}

TEST(DrawTest, EachCoreCarriesItsOwnerAndRunsAreOneBox) {
  NodePicture node;
  node.name = "trn-7";
  node.caption = "trn2.48xlarge";
  node.type = &Type("trn2.48xlarge");
  node.devices = 16;
  node.cores_per_device = 4;
  node.core_owner.assign(64, -1);
  for (int c = 0; c < 16; ++c) node.core_owner[static_cast<size_t>(c)] = 0;  // devices 0-3
  node.core_owner[20] = 1;                                                   // device 5, core 20
  node.marked_devices = {9};
  const std::vector<Owner> owners = {{"team/a", "team/a (main)", "#123456", "fleet?pod=team/a"},
                                     {"team/<b>", "team/<b>", "#654321", ""}};
  const std::string svg = NodeSvg(node, owners);
  EXPECT_THAT(svg, HasSubstr("data-node=\"trn-7\""));
  EXPECT_EQ(Count(svg, "data-owner=\"team/a\""), 4);  // one box per device, not per core
  EXPECT_THAT(svg, HasSubstr("data-device=\"3\" data-cores=\"12-15\" data-owner=\"team/a\""));
  EXPECT_THAT(svg,
              HasSubstr("data-device=\"5\" data-cores=\"20-20\" data-owner=\"team/&lt;b&gt;\""));
  EXPECT_THAT(svg, HasSubstr("data-device=\"5\" data-cores=\"21-23\" data-owner=\"\""));
  EXPECT_EQ(Count(svg, "<a href=\"fleet?pod=team/a\">"), 4);
  EXPECT_EQ(Count(svg, "class=\"marked\""), 1);
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  // A 4x4 torus: 24 links inside the grid, and each of the 8 wrap-arounds as two stubs, in one
  // path.
  const size_t links = svg.find("class=\"links\"");
  ASSERT_NE(links, std::string::npos);
  EXPECT_EQ(Count(svg.substr(links, svg.find("/>", links) - links), "M"), 24 + 16);
}

TEST(DrawTest, NeighbouringOwnersGetDistinctColours) {
  for (int i = 0; i < 20; ++i) EXPECT_NE(OwnerColour(i), OwnerColour(i + 1));
  EXPECT_EQ(OwnerColour(-1), std::string(kFreeColour));
}

TEST(DrawTest, LineChartKeepsPeaksAndEscapesNames) {
  const std::vector<Series> series = {
      {"<ours>", "#111", {{0, 0.1}, {5, 0.9}, {5.001, 0.2}, {10, 0.2}}}};
  ChartAxes axes;
  axes.percent = true;
  axes.x_min = 0;
  axes.x_max = 10;
  axes.x_label = "minutes";
  const std::string svg = LineChart(series, axes);
  EXPECT_THAT(svg, HasSubstr("<title>&lt;ours&gt;</title>"));
  EXPECT_THAT(svg, HasSubstr("100%"));
  // The peak at 0.9 survives in its pixel column: y = 14 + (1 - 0.9) * 224 = 36.4.
  EXPECT_THAT(svg, HasSubstr(" 36.4 "));
  EXPECT_EQ(HtmlEscape("a&b\"'"), "a&amp;b&quot;&#39;");
}

}  // namespace
}  // namespace toposched::draw
