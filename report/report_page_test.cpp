// `dtrain report`'s page (report/report_page.h) from metrics.jsonl files as dtrain train writes
// them: the charts every run has, the loss scale's and the experts' only where a run has them,
// each run a series in each chart, a page that is one self-contained document, and a file that
// is not a run's metrics named with its line.
#include "report/report_page.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "tests/testing.h"

namespace dt::report {
namespace {

// A run directory `name` under `dir` whose metrics.jsonl holds `steps` steps (the layout of
// train/metrics.h), a validation every 2, and `extra` added to each step's record.
std::filesystem::path write_run(const testing::TempDir& dir, const std::string& name, int steps,
                                const std::string& extra = "") {
  const std::filesystem::path run = dir.path() / name;
  std::filesystem::create_directories(run);
  std::ofstream out(run / "metrics.jsonl");
  for (int s = 1; s <= steps; ++s) {
    out << "{\"step\":" << s << ",\"loss\":" << 5.0 - 0.1 * s << ",\"lr\":" << (s == 2 ? "null" : "0.001")
        << ",\"grad_norm\":1.5,\"tokens\":4096,\"tokens_per_s\":1000,\"step_ms\":4,\"mfu\":0.4,\"hfu\":0.4,"
        << "\"loss_scale\":1.0,\"skipped\":false,\"peak_bytes\":{\"parameters\":1048576,\"activations\":2097152}"
        << extra << "}\n";
    if (s % 2 == 0) out << "{\"step\":" << s << ",\"val_loss\":" << 5.1 - 0.1 * s << "}\n";
  }
  return run;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ReportPage, ChartsEveryRunsMetricsOverlaid) {
  const testing::TempDir dir;
  const RunSeries a = read_run_series(write_run(dir, "baseline", 6)), b = read_run_series(write_run(dir, "fp8", 4));
  EXPECT_EQ(a.name, "baseline");
  EXPECT_EQ(a.series.at("val_loss").size(), 3u);
  EXPECT_TRUE(std::isnan(a.series.at("lr")[1].second));  // a skipped step's null
  EXPECT_EQ(a.series.at("memory/activations").back().second, 2097152);
  const std::vector<Plot> plots = report_plots({a, b});
  std::vector<std::string> titles;
  for (const Plot& p : plots) titles.push_back(p.title);
  EXPECT_EQ(titles, (std::vector<std::string>{"loss (lines: training; dots: validation)", "learning rate",
                                              "gradient norm", "throughput", "model FLOPs utilization",
                                              "memory by tag (the step's peak)"}));
  EXPECT_EQ(plots[0].series.size(), 4u);  // each run's training line and validation dots
  EXPECT_EQ(plots[4].series[0].points[0].second, 40);  // MFU in percent
  EXPECT_EQ(plots[5].series.size(), 4u);  // each run's two tags
  EXPECT_EQ(plots[5].series[0].label, "baseline: activations");
  EXPECT_EQ(plots[5].series[0].points[0].second, 2);  // MiB

  const std::string page = report_page({a, b});
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(page, "<svg "), plots.size());
  EXPECT_EQ(count(page, "</svg>"), plots.size());
  EXPECT_EQ(page.find("<script"), std::string::npos);  // nothing runs,
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));  // nothing is fetched
  EXPECT_NE(page.find("<td>baseline</td><td>6</td><td>4.4</td><td>4.5</td>"), std::string::npos) << page;
}

TEST(ReportPage, TheLossScaleAndTheExpertsLoadOnlyWhereARunHasThem) {
  const testing::TempDir dir;
  const RunSeries plain = read_run_series(write_run(dir, "plain", 3));
  const RunSeries moe = read_run_series(write_run(dir, "moe", 3, ",\"expert_imbalance\":{\"h.0\":1.5,\"h.1\":1.25}"));
  const RunSeries fp16 = read_run_series(write_run(dir, "fp16", 3, ""));
  EXPECT_EQ(report_plots({plain}).size(), 6u);
  const std::vector<Plot> with_experts = report_plots({plain, moe});
  ASSERT_EQ(with_experts.size(), 7u);
  EXPECT_EQ(with_experts.back().series.size(), 2u);  // moe's two blocks
  EXPECT_EQ(with_experts.back().series[1].label, "moe: h.1");
  RunSeries scaled = fp16;
  scaled.series["loss_scale"] = {{1, 65536}, {2, 32768}, {3, 32768}};
  EXPECT_EQ(report_plots({scaled}).at(6).title, "loss scale");
}

TEST(ReportPage, AFileThatIsNotARunsMetricsIsNamedWithItsLine) {
  const testing::TempDir dir;
  EXPECT_NE(testing::error_of([&] { read_run_series(dir.path() / "none"); }).find("metrics.jsonl: cannot be read"),
            std::string::npos);
  const std::filesystem::path run = write_run(dir, "broken", 2);
  std::ofstream(run / "metrics.jsonl", std::ios::app) << "not json\n";
  EXPECT_NE(testing::error_of([&] { read_run_series(run); }).find("metrics.jsonl:4: not a metrics record"),
            std::string::npos);
}

}  // namespace
}  // namespace dt::report
