#include "report/report_page.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include "core/error.h"

namespace dt::report {

namespace {

// Runs' colours, one a run (cycled); within a run, a chart of several series of one run (memory's
// tags, the expert blocks) takes the colours in order instead.
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
std::string colour(size_t i) { return kColours[i % std::size(kColours)]; }

using Points = std::vector<std::pair<double, double>>;

// A value of the record, or NaN where it is null (a skipped step's).
double value(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; }

const Points* find(const RunSeries& run, const std::string& name) {
  const auto it = run.series.find(name);
  return it == run.series.end() ? nullptr : &it->second;
}

// The names of `run`'s series that start with `prefix` ("memory/").
std::vector<std::string> with_prefix(const RunSeries& run, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& [name, points] : run.series)
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  return names;
}

// A chart of one series per run, `scale` applied to the values.
Plot per_run(const std::vector<RunSeries>& runs, const std::string& series, const std::string& title,
             const std::string& y_label, double scale = 1) {
  Plot plot{.id = series, .title = title, .x_label = "step", .y_label = y_label, .series = {}};
  for (size_t r = 0; r < runs.size(); ++r)
    if (const Points* points = find(runs[r], series)) {
      Points scaled = *points;
      for (auto& [x, y] : scaled) y *= scale;
      plot.series.push_back({.label = runs[r].name, .colour = colour(r), .points = std::move(scaled), .dots = false});
    }
  return plot;
}

// A chart of every series under `prefix` of every run but those at 0 throughout: one colour a series of one run, one a run
// of several, the legend naming both.
Plot grouped(const std::vector<RunSeries>& runs, const std::string& prefix, const std::string& title,
             const std::string& y_label, double scale) {
  Plot plot{.id = prefix.substr(0, prefix.size() - 1), .title = title, .x_label = "step", .y_label = y_label,
            .series = {}};
  size_t next = 0;
  for (const RunSeries& run : runs)
    for (const std::string& name : with_prefix(run, prefix)) {
      // A series at 0 throughout (a memory tag the run never used) would only crowd the chart.
      if (std::ranges::all_of(*find(run, name), [](const auto& p) { return p.second == 0; })) continue;
      Points scaled = *find(run, name);
      for (auto& [x, y] : scaled) y *= scale;
      const std::string what = name.substr(prefix.size());
      plot.series.push_back({.label = runs.size() == 1 ? what : str(run.name, ": ", what), .colour = colour(next++),
                             .points = std::move(scaled), .dots = false});
    }
  return plot;
}

bool any_run(const std::vector<RunSeries>& runs, const std::function<bool(const RunSeries&)>& has) {
  return std::ranges::any_of(runs, has);
}

}  // namespace

RunSeries read_run_series(const std::filesystem::path& run_dir) {
  const std::filesystem::path file = run_dir / "metrics.jsonl";
  std::ifstream in(file);
  if (!in) throw Error(str(file.string(), ": cannot be read; give a run directory (log.run_dir) that has trained a step"));
  RunSeries run{.name = std::filesystem::absolute(run_dir).lexically_normal().filename().string(), .series = {}};
  if (run.name.empty()) run.name = std::filesystem::absolute(run_dir).lexically_normal().parent_path().filename().string();
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number())
      throw Error(str(file.string(), ":", line_number, ": not a metrics record (one JSON object with a \"step\" a line, "
                                                      "as dtrain train writes them)"));
    const double step = record["step"].get<double>();
    const auto add = [&](const std::string& name, double v) { run.series[name].emplace_back(step, v); };
    for (const char* key : {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "mfu", "loss_scale"})
      if (record.contains(key)) add(key, value(record[key]));
    for (const char* group : {"peak_bytes", "expert_imbalance"})
      if (record.contains(group) && record[group].is_object())
        for (const auto& [name, v] : record[group].items())
          add(str(std::string(group) == "peak_bytes" ? "memory/" : "expert_imbalance/", name), value(v));
  }
  if (run.series.empty()) throw Error(str(file.string(), ": holds no metrics yet; train a step first"));
  return run;
}

std::vector<Plot> report_plots(const std::vector<RunSeries>& runs) {
  std::vector<Plot> plots;
  // Loss: a run's training loss as a line, its validation loss as dots of the same colour.
  Plot loss{.id = "loss", .title = "loss (lines: training; dots: validation)", .x_label = "step",
            .y_label = "loss (nats a token)", .series = {}};
  for (size_t r = 0; r < runs.size(); ++r) {
    if (const Points* train = find(runs[r], "loss"))
      loss.series.push_back({.label = runs[r].name, .colour = colour(r), .points = *train, .dots = false});
    if (const Points* val = find(runs[r], "val_loss"))
      loss.series.push_back({.label = "", .colour = colour(r), .points = *val, .dots = true});
  }
  plots.push_back(std::move(loss));
  plots.push_back(per_run(runs, "lr", "learning rate", "learning rate"));
  plots.push_back(per_run(runs, "grad_norm", "gradient norm", "global norm (before clipping)"));
  plots.push_back(per_run(runs, "tokens_per_s", "throughput", "tokens/s"));
  plots.push_back(per_run(runs, "mfu", "model FLOPs utilization", "MFU (%)", 100));
  plots.push_back(grouped(runs, "memory/", "memory by tag (the step's peak)", "MiB", 1.0 / (1 << 20)));
  const bool scaled = any_run(runs, [](const RunSeries& run) {
    const Points* s = find(run, "loss_scale");
    return s != nullptr && std::ranges::any_of(*s, [](const auto& p) { return p.second != 1; });
  });
  if (scaled) plots.push_back(per_run(runs, "loss_scale", "loss scale", "loss scale"));
  if (any_run(runs, [](const RunSeries& run) { return !with_prefix(run, "expert_imbalance/").empty(); }))
    plots.push_back(grouped(runs, "expert_imbalance/", "expert load (busiest expert over the mean)", "imbalance", 1));
  return plots;
}

std::string report_page(const std::vector<RunSeries>& runs) {
  std::string names;
  for (const RunSeries& run : runs) names += str(names.empty() ? "" : ", ", run.name);
  std::string page = str(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>dtrain report: ",
      xml_escaped(names), "</title>\n<style>body { font-family: sans-serif; margin: 2em; } "
      "figure { display: inline-block; margin: 0.5em; } table { border-collapse: collapse; } "
      "td, th { padding: 0.2em 0.8em; text-align: right; }</style>\n</head>\n<body>\n<h1>dtrain report</h1>\n"
      "<table>\n<tr><th>run</th><th>steps</th><th>last loss</th><th>last validation loss</th></tr>\n");
  for (const RunSeries& run : runs) {
    const auto last = [&](const char* name) {
      const Points* points = find(run, name);
      return points == nullptr || points->empty() ? std::string("-") : str(points->back().second);
    };
    const Points* loss = find(run, "loss");
    page += str("<tr><td>", xml_escaped(run.name), "</td><td>",
                loss == nullptr || loss->empty() ? 0 : static_cast<int64_t>(loss->back().first), "</td><td>",
                last("loss"), "</td><td>", last("val_loss"), "</td></tr>\n");
  }
  page += "</table>\n";
  for (const Plot& plot : report_plots(runs)) page += str("<figure>\n", svg_plot(plot), "</figure>\n");
  page += "</body>\n</html>\n";
  return page;
}

}  // namespace dt::report
