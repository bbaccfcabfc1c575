// The SVG chart (report/svg_plot.h): points land inside the axes where their values say, the
// axes' ticks are round numbers covering the values, text is escaped, values that are not finite
// are left out, and a chart with none says so.
#include "report/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

namespace dt::report {
namespace {

// The numbers of every "x,y" pair of the chart's polylines.
std::vector<std::pair<double, double>> polyline_points(const std::string& svg) {
  std::vector<std::pair<double, double>> out;
  const std::regex points("points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), points); it != std::sregex_iterator(); ++it) {
    std::string list = (*it)[1];
    const std::regex pair("(-?[0-9.]+),(-?[0-9.]+)");
    for (auto p = std::sregex_iterator(list.begin(), list.end(), pair); p != std::sregex_iterator(); ++p)
      out.emplace_back(std::stod((*p)[1]), std::stod((*p)[2]));
  }
  return out;
}

TEST(SvgPlot, PointsLandWhereTheirValuesSayInsideTheAxes) {
  // 560 x 300: the axes span x 70..545 and y 30..255.
  const Plot plot{.id = "chart", .title = "loss", .x_label = "step", .y_label = "nats",
                  .series = {{.label = "run", .colour = "#000", .points = {{0, 4}, {50, 3}, {100, 2}}, .dots = false}}};
  const std::string svg = svg_plot(plot);
  const auto points = polyline_points(svg);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_NEAR(points[0].first, 70, 0.05);    // x 0: the left edge
  EXPECT_NEAR(points[2].first, 545, 0.05);   // x 100: the right edge
  EXPECT_NEAR(points[1].first, 307.5, 0.05);
  EXPECT_NEAR(points[0].second, 30, 0.05);   // y 4: the top
  EXPECT_NEAR(points[2].second, 255, 0.05);  // y 2: the bottom
  // Round ticks: 0 to 100 by 20 (five steps at most), 2 to 4 by 0.5.
  for (const char* text : {">loss<", ">step<", ">nats<", ">run<", ">0<", ">20<", ">100<", ">2<", ">2.5<", ">4<"})
    EXPECT_NE(svg.find(text), std::string::npos) << text << "\n" << svg;
  EXPECT_EQ(svg.find(">50<"), std::string::npos) << svg;
}

TEST(SvgPlot, LeavesOutValuesThatAreNotFiniteAndEscapesText) {
  const Plot plot{.id = "chart", .title = "a < b & c", .x_label = "", .y_label = "",
                  .series = {{.label = "\"run\"", .colour = "#000", .points = {{1, 1}, {2, NAN}, {3, 2}}, .dots = false},
                             {.label = "", .colour = "#f00", .points = {{2, 1.5}}, .dots = true}}};
  const std::string svg = svg_plot(plot);
  EXPECT_EQ(polyline_points(svg).size(), 2u);
  EXPECT_NE(svg.find("<circle"), std::string::npos);
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  EXPECT_NE(svg.find("&quot;run&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  const std::string empty = svg_plot({.id = "none", .title = "none", .x_label = "", .y_label = "",
                                      .series = {{.label = "x", .colour = "#000", .points = {{1, NAN}}, .dots = false}}});
  EXPECT_NE(empty.find("no values"), std::string::npos);
}

}  // namespace
}  // namespace dt::report
