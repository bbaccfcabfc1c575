// `dtrain report RUN_DIR...`: a page of a real run's metrics, written beside them or where --out
// says, and the mistakes named.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/testing.h"
#include "tests/train_run.h"

namespace dt {
namespace {

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

  EXPECT_NE(run_dtrain("report").output.find("report: give one or more run directories"), std::string::npos);
  EXPECT_NE(run_dtrain(str("report ", run.path("missing"))).output.find("metrics.jsonl: cannot be read"),
            std::string::npos);
  EXPECT_NE(run_dtrain(str("report ", run.path("a"), " --out ", run.path("no/such/dir/x.html"))).output.find(
                "report: cannot write"),
            std::string::npos);
}

}  // namespace
}  // namespace dt
