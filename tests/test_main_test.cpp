// The outcome ctest gives each kind of test (tests/test_main.cpp): the OutcomeHelper cases below
// are run by the TestOutcome tests as a ctest case would run them — a process of this binary
// filtered to some cases — and each outcome is read as ctest reads it: skipped when the output
// matches the skip marker (SKIP_REGULAR_EXPRESSION, CMakeLists.txt), else passed on status 0.
// Run any other way, the helpers skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

constexpr const char* kHelperVariable = "DTRAIN_OUTCOME_HELPER";

bool helper_run() { return std::getenv(kHelperVariable) != nullptr; }

#define DT_HELPER_ONLY() \
  if (!helper_run()) GTEST_SKIP() << "run by the TestOutcome tests"

TEST(OutcomeHelper, Passes) {
  DT_HELPER_ONLY();
  SUCCEED();
}

TEST(OutcomeHelper, SkipsWithAReason) {
  DT_HELPER_ONLY();
  GTEST_SKIP() << "the reason it gives";
}

TEST(OutcomeHelper, SkipsWithoutAReason) {
  DT_HELPER_ONLY();
  GTEST_SKIP();
}

// What a failing test that shows a skipped child's output prints (comm/mpi_watchdog_test.cpp).
TEST(OutcomeHelper, FailsAfterPrintingGoogleTestsSkipLine) {
  DT_HELPER_ONLY();
  std::printf("[  SKIPPED ] OutcomeHelper.SomethingElse\n");
  ADD_FAILURE() << "the failure";
}

// A suite whose set-up fails: GoogleTest marks its tests skipped (cli/workflow_cli_test.cpp's
// fixture sets up with commands that could fail).
class OutcomeHelperFailingSetUp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (helper_run()) FAIL() << "the suite's set-up failed";
  }
};

TEST_F(OutcomeHelperFailingSetUp, NeverRuns) { DT_HELPER_ONLY(); }

enum class Outcome { passed, failed, skipped };

const char* outcome_name(Outcome o) { return o == Outcome::passed ? "passed" : o == Outcome::failed ? "failed" : "skipped"; }

struct CaseRun {
  Outcome outcome;
  testing::CommandResult result;
};

// The cases matching `filter` in a process of their own, as ctest would start it (`launcher`
// and `environment` before it), not as a child of this test (which would never print the
// marker), and the outcome ctest would give them.
CaseRun run_cases(const std::string& filter, const std::string& environment = "", const std::string& launcher = "") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  CaseRun run{.outcome = Outcome::failed,
          .result = testing::run_command(str("env -u DTRAIN_TEST_NESTED ", kHelperVariable, "=1 ", environment, " ",
                                             launcher, " ", self, " --gtest_filter='", filter, "'"))};
  if (run.result.output.find(DTRAIN_SKIP_MARKER) != std::string::npos)
    run.outcome = Outcome::skipped;
  else if (run.result.status == 0)
    run.outcome = Outcome::passed;
  return run;
}

#define EXPECT_OUTCOME(run, expected) \
  EXPECT_STREQ(outcome_name((run).outcome), outcome_name(expected)) << (run).result.output

TEST(TestOutcome, APassingTestPasses) { EXPECT_OUTCOME(run_cases("OutcomeHelper.Passes"), Outcome::passed); }

TEST(TestOutcome, ASkipWithAReasonIsASkipThatNamesIt) {
  const CaseRun run = run_cases("OutcomeHelper.SkipsWithAReason");
  EXPECT_OUTCOME(run, Outcome::skipped);
  EXPECT_NE(run.result.output.find(str(DTRAIN_SKIP_MARKER, " OutcomeHelper.SkipsWithAReason: the reason it gives")),
            std::string::npos)
      << run.result.output;
}

TEST(TestOutcome, ASkipWithoutAReasonFails) {
  const CaseRun run = run_cases("OutcomeHelper.SkipsWithoutAReason");
  EXPECT_OUTCOME(run, Outcome::failed);
  EXPECT_NE(run.result.output.find("skipped without saying why"), std::string::npos) << run.result.output;
}

TEST(TestOutcome, AFailureThatPrintsGoogleTestsSkipLineFails) {
  EXPECT_OUTCOME(run_cases("OutcomeHelper.FailsAfterPrintingGoogleTestsSkipLine"), Outcome::failed);
}

TEST(TestOutcome, ASuiteWhoseSetUpFailsFails) {
  EXPECT_OUTCOME(run_cases("OutcomeHelperFailingSetUp.*"), Outcome::failed);
}

// A skip next to a failure is a failure; a skip next to a pass, in a process that runs many
// tests (a direct run), is a pass: GoogleTest's summary names the skipped test.
TEST(TestOutcome, SkipsBesideOtherOutcomesTakeTheirs) {
  EXPECT_OUTCOME(run_cases("OutcomeHelper.SkipsWithAReason:OutcomeHelper.FailsAfterPrintingGoogleTestsSkipLine"),
                 Outcome::failed);
  EXPECT_OUTCOME(run_cases("OutcomeHelper.SkipsWithAReason:OutcomeHelper.Passes"), Outcome::passed);
}

TEST(TestOutcome, AFilterThatMatchesNoTestFails) {
  const CaseRun run = run_cases("OutcomeHelper.NoSuchTest");
  EXPECT_OUTCOME(run, Outcome::failed);
  EXPECT_NE(run.result.output.find("no test ran"), std::string::npos) << run.result.output;
}

// A process started by a test never prints the marker, so a failing test that shows a skipped
// child's output is never read as skipped.
TEST(TestOutcome, ANestedRunNeverPrintsTheMarker) {
  const CaseRun run = run_cases("OutcomeHelper.SkipsWithAReason", "DTRAIN_TEST_NESTED=1");
  EXPECT_EQ(run.result.status, 0) << run.result.output;
  EXPECT_EQ(run.result.output.find(DTRAIN_SKIP_MARKER), std::string::npos) << run.result.output;
}

// A multi-rank case (DTRAIN_TEST_RANKS) fails when it was not launched as that many ranks, and
// when some of its tests ran while others skipped: one ctest result cannot say both.
TEST(TestOutcome, AMultiRankCaseRunsAsItsRanksAndAllItsTestsOrNone) {
  const CaseRun alone = run_cases("OutcomeHelper.Passes", "DTRAIN_TEST_RANKS=2");
  EXPECT_OUTCOME(alone, Outcome::failed);
  EXPECT_NE(alone.result.output.find("DTRAIN_TEST_RANKS=2 but no launcher started this process"), std::string::npos)
      << alone.result.output;
  const std::string two_ranks = str(testing::mpirun(2), "-x ", kHelperVariable, " -x DTRAIN_TEST_RANKS ");
  const CaseRun mixed = run_cases("OutcomeHelper.Passes:OutcomeHelper.SkipsWithAReason", "DTRAIN_TEST_RANKS=2", two_ranks);
  EXPECT_OUTCOME(mixed, Outcome::failed);
  EXPECT_NE(mixed.result.output.find("must run all its tests or none"), std::string::npos) << mixed.result.output;
  EXPECT_OUTCOME(run_cases("OutcomeHelper.Passes", "DTRAIN_TEST_RANKS=3", two_ranks), Outcome::failed);
  EXPECT_OUTCOME(run_cases("OutcomeHelper.Passes", "DTRAIN_TEST_RANKS=2", two_ranks), Outcome::passed);
}

}  // namespace
}  // namespace dt
