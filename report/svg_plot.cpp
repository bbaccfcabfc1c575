#include "report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace dt::report {

namespace {

// v as printf's `format` writes it: "%.4g" for the labels, "%.1f" for coordinates.
std::string printed(const char* format, double v) {
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}
std::string number(double v) { return printed("%.4g", v); }
std::string coordinate(double v) { return printed("%.1f", v); }

}  // namespace

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  return out;
}

namespace {

// Tick values for [lo, hi]: multiples of 1, 2 or 5 times a power of ten, two to six of them.
std::vector<double> ticks(double lo, double hi) {
  const double rough = (hi - lo) / 5, power = std::pow(10, std::floor(std::log10(rough)));
  double step = power;
  for (const double m : {2.0, 5.0, 10.0})
    if (rough > step) step = m * power;
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return out;
}

}  // namespace

std::string svg_plot(const Plot& plot, int width, int height) {
  const double left = 70, right = 15, top = 30, bottom = 45;
  const double w = width - left - right, h = height - top - bottom;
  // The legend below the axes, a row each labelled series.
  const int rows = static_cast<int>(std::ranges::count_if(plot.series, [](const PlotSeries& s) { return !s.label.empty(); }));
  const int total = height + 16 * rows + (rows > 0 ? 6 : 0);
  std::string svg = str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"", total,
                        "\" viewBox=\"0 0 ", width, " ", total, "\" font-family=\"sans-serif\" font-size=\"12\">\n",
                        "<text x=\"", width / 2, "\" y=\"18\" text-anchor=\"middle\" font-weight=\"bold\">",
                        xml_escaped(plot.title), "</text>\n");
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const PlotSeries& s : plot.series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!(x0 <= x1)) {
    svg += str("<text x=\"", width / 2, "\" y=\"", height / 2, "\" text-anchor=\"middle\">no values</text>\n</svg>\n");
    return svg;
  }
  // A flat series or a single point still gets a span to draw in.
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) {
    const double pad = y0 == 0 ? 1 : std::fabs(y0) * 0.05;
    y0 -= pad, y1 += pad;
  }
  const auto px = [&](double x) { return left + w * (x - x0) / (x1 - x0); };
  const auto py = [&](double y) { return top + h * (1 - (y - y0) / (y1 - y0)); };
  svg += str("<rect x=\"", left, "\" y=\"", top, "\" width=\"", w, "\" height=\"", h,
             "\" fill=\"none\" stroke=\"#888\"/>\n");
  for (const double x : ticks(x0, x1))
    svg += str("<text x=\"", coordinate(px(x)), "\" y=\"", coordinate(top + h + 16), "\" text-anchor=\"middle\">",
               number(x), "</text>\n");
  for (const double y : ticks(y0, y1))
    svg += str("<line x1=\"", left, "\" x2=\"", left + w, "\" y1=\"", coordinate(py(y)), "\" y2=\"", coordinate(py(y)),
               "\" stroke=\"#eee\"/>\n<text x=\"", coordinate(left - 6), "\" y=\"", coordinate(py(y) + 4),
               "\" text-anchor=\"end\">", number(y), "</text>\n");
  svg += str("<text x=\"", coordinate(left + w / 2), "\" y=\"", height - 8, "\" text-anchor=\"middle\">",
             xml_escaped(plot.x_label), "</text>\n<text transform=\"translate(14 ", coordinate(top + h / 2),
             ") rotate(-90)\" text-anchor=\"middle\">", xml_escaped(plot.y_label), "</text>\n");
  int listed = 0;
  for (const PlotSeries& s : plot.series) {
    std::string line;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (s.dots)
        svg += str("<circle cx=\"", coordinate(px(x)), "\" cy=\"", coordinate(py(y)), "\" r=\"2.5\" fill=\"", s.colour,
                   "\"/>\n");
      else
        line += str(line.empty() ? "" : " ", coordinate(px(x)), ",", coordinate(py(y)));
    }
    if (!line.empty())
      svg += str("<polyline points=\"", line, "\" fill=\"none\" stroke=\"", s.colour, "\" stroke-width=\"1.3\"/>\n");
    if (s.label.empty()) continue;
    const double ly = height + 12 + 16 * listed++;
    svg += str("<rect x=\"", left, "\" y=\"", coordinate(ly - 9), "\" width=\"12\" height=\"8\" fill=\"", s.colour,
               "\"/>\n<text x=\"", left + 18, "\" y=\"", coordinate(ly), "\">", xml_escaped(s.label), "</text>\n");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace dt::report
