#include <cstdio>
#include <fstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "report/report_page.h"

namespace dt::cli {

int command_report(int argc, char** argv, int first) {
  Args args("report", "one self-contained HTML page of runs' metrics (inline SVG charts, nothing fetched), the "
                      "runs overlaid: loss and validation loss, learning rate, gradient norm, throughput, MFU, "
                      "memory by tag, and where present the loss scale and the experts' load");
  args.positional("RUN_DIR...", "run directories (log.run_dir), each with its metrics.jsonl")
      .flag("out", "", "the page to write (\"\": the first run's report.html)")
      .flag("svg-dir", "", "also write each chart as ID.svg in this directory (loss.svg, lr.svg, ...; \"\": none)");
  if (!args.parse(argc, argv, first)) return 0;
  const std::string out = args.get("out"), svg_dir = args.get("svg-dir");
  if (args.positionals().empty()) throw Error(str("report: give one or more run directories\n", args.usage()));
  std::vector<report::RunSeries> runs;
  for (const std::string& dir : args.positionals()) runs.push_back(report::read_run_series(dir));
  const std::filesystem::path file =
      out.empty() ? std::filesystem::path(args.positionals().front()) / "report.html" : std::filesystem::path(out);
  std::ofstream page(file);
  page << report::report_page(runs);
  if (!page.flush()) throw Error(str("report: cannot write ", file.string(), "; give a writable --out"));
  const std::vector<report::Plot> plots = report::report_plots(runs);
  std::printf("wrote %s: %zu charts of %zu run%s\n", file.c_str(), plots.size(), runs.size(),
              runs.size() == 1 ? "" : "s");
  if (svg_dir.empty()) return 0;
  std::filesystem::create_directories(svg_dir);
  for (const report::Plot& plot : plots) {
    const std::filesystem::path chart = std::filesystem::path(svg_dir) / (plot.id + ".svg");
    std::ofstream svg(chart);
    svg << report::svg_plot(plot);
    if (!svg.flush()) throw Error(str("report: cannot write ", chart.string(), "; give a writable --svg-dir"));
  }
  std::printf("wrote each chart as ID.svg in %s\n", svg_dir.c_str());
  return 0;
}

}  // namespace dt::cli
