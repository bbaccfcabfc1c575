// A line chart as SVG text, for a page to inline (report/report_page.h): series of (x, y) points
// on shared axes, each drawn as a line or as dots, with a title, round ticks on each axis (1, 2 or
// 5 times a power of ten), the axes' labels and a legend below, a row each labelled series. Points whose x or y is not finite are left out (a skipped step's
// null learning rate); a chart without any point says so instead of drawing axes.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dt::report {

struct PlotSeries {
  std::string label;   // in the legend; empty: not listed
  std::string colour;  // an SVG colour, "#1f77b4"
  std::vector<std::pair<double, double>> points;
  bool dots = false;   // points (evaluations) rather than a line (every step)
};

struct Plot {
  std::string id;  // a short name, a file's stem ("loss")
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
};

// The chart, `width` x `height` pixels and the legend's rows below; its text escaped for XML.
std::string svg_plot(const Plot& plot, int width = 560, int height = 300);

// Text made safe inside XML: &, <, > and quotes escaped.
std::string xml_escaped(const std::string& text);

}  // namespace dt::report
