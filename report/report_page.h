// `dtrain report`'s page: one self-contained HTML file (inline SVG charts, no script, nothing
// fetched) of one or more runs' metrics.jsonl (train/metrics.h), the runs overlaid in each chart
// for comparison:
//
//   loss            training loss every step, validation loss where evaluated (dots)
//   learning rate, gradient norm, throughput (tokens/s), MFU
//   memory          the peak bytes of each tag (core/allocator.h) over the steps, in MiB; a
//                   tag a run never used is left out
//   loss scale      where some run's scale is not 1 (fp16 with loss scaling)
//   expert load     where some run is a mixture of experts: each expert block's busiest expert's
//                   load over the mean (expert_imbalance)
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "report/svg_plot.h"

namespace dt::report {

// One run's series by name: "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "mfu",
// "loss_scale", "memory/<tag>", "expert_imbalance/<block>"; each (step, value), in file order
// (a resumed run's repeated steps are each kept).
struct RunSeries {
  std::string name;  // the run directory's name
  std::map<std::string, std::vector<std::pair<double, double>>> series;
};

// `run_dir`/metrics.jsonl; throws dt::Error naming the file (and the line) when it is missing or
// a line is not a metrics record.
RunSeries read_run_series(const std::filesystem::path& run_dir);

// The charts of these runs, in the page's order.
std::vector<Plot> report_plots(const std::vector<RunSeries>& runs);

// The page: a title, a line per run (its steps and last losses), then report_plots' charts.
std::string report_page(const std::vector<RunSeries>& runs);

}  // namespace dt::report
