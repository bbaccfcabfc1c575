// `dtrain report RUN_DIR...`: a page of a real run's metrics, written beside them or where --out
// says, and the mistakes named; and the page in a real browser.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/testing.h"
#include "tests/train_run.h"

namespace dt {
namespace {

using testing::run_command;
using testing::run_dtrain;

TEST(ReportCli, WritesOnePageOfRealRuns) {
  const testing::TrainRun run;
  ASSERT_EQ(run_dtrain(run.args("a", "train.steps=6 eval.every=3")).status, 0);
  ASSERT_EQ(run_dtrain(run.args("b", "train.steps=6 eval.every=3 optim.lr=1e-3")).status, 0);
  const auto one = run_dtrain(str("report ", run.path("a")));
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_NE(one.output.find("report.html: 6 charts of 1 run"), std::string::npos) << one.output;
  const std::filesystem::path out = run.path("compare.html");
  const auto two = run_dtrain(str("report ", run.path("a"), " ", run.path("b"), " --out ", out));
  ASSERT_EQ(two.status, 0) << two.output;
  std::ifstream in(out);
  const std::string page((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(page.find("<td>a</td><td>6</td>"), std::string::npos);
  EXPECT_NE(page.find("<td>b</td><td>6</td>"), std::string::npos);
  EXPECT_NE(page.find("</html>"), std::string::npos);
  const std::filesystem::path charts = run.path("charts");
  ASSERT_EQ(run_dtrain(str("report ", run.path("a"), " --svg-dir ", charts)).status, 0);
  for (const char* id : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory"})
    EXPECT_TRUE(std::filesystem::exists(charts / str(id, ".svg"))) << id;

  EXPECT_NE(run_dtrain("report").output.find("report: give one or more run directories"), std::string::npos);
  EXPECT_NE(run_dtrain(str("report ", run.path("missing"))).output.find("metrics.jsonl: cannot be read"),
            std::string::npos);
  EXPECT_NE(run_dtrain(str("report ", run.path("a"), " --out ", run.path("no/such/dir/x.html"))).output.find(
                "report: cannot write"),
            std::string::npos);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Debian's Chromium, headless, loads the page and prints its DOM as the browser parsed it: every
// chart is there, each with its title, its lines and its dots (an element the browser could not
// parse would be missing or read as text).
TEST(ReportCli, APageLoadsInABrowserWithEveryChartDrawn) {
  if (run_command("command -v chromium").status != 0)
    GTEST_SKIP() << "needs Chromium (scripts/setup.sh --tests installs Debian's chromium)";
  const testing::TrainRun run;
  ASSERT_EQ(run_dtrain(run.args("run", "train.steps=6 eval.every=3")).status, 0);
  const std::filesystem::path page = run.path("page.html");
  ASSERT_EQ(run_dtrain(str("report ", run.path("run"), " --out ", page)).status, 0);
  const auto dom = run_command(str("(timeout 120 chromium --headless --no-sandbox --disable-gpu --dump-dom file://",
                                   page.string(), " 2>/dev/null)"));
  ASSERT_EQ(dom.status, 0) << dom.output;
  EXPECT_EQ(count(dom.output, "<svg "), 6u) << dom.output;
  EXPECT_EQ(count(dom.output, "</svg>"), 6u);
  // Five charts a line each, memory one each of the five tags a one-rank run uses (not
  // communication nor checkpoint).
  EXPECT_EQ(count(dom.output, "<polyline "), 10u);
  EXPECT_EQ(count(dom.output, "<circle "), 2u);    // the validations at steps 3 and 6
  EXPECT_NE(dom.output.find(">throughput</text>"), std::string::npos);
  EXPECT_NE(dom.output.find("<td>run</td><td>6</td>"), std::string::npos);
}

}  // namespace
}  // namespace dt
