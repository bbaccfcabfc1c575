// The test binary's main. ctest reads one result per process: passed, failed or skipped. This
// main makes that result true by construction:
//
// - Skipped only when every test the process ran was skipped, none failed, and each skip gave its
//   reason. Only then does it print DTRAIN_SKIP_MARKER (CMakeLists.txt defines it, as ctest's
//   SKIP_REGULAR_EXPRESSION), once per skipped test with the reason. GoogleTest's own "[  SKIPPED ]" lines are not the
//   marker, so a failing test can never be read as skipped, whatever it printed.
// - Failed when no test ran: a filter that matches nothing is a mistake, not a pass.
// - A process started by a test (a helper job under mpirun, a nested run) never prints the
//   marker: DTRAIN_TEST_NESTED is set for every child, so output a test prints on failure cannot
//   hold one.
// - A multi-rank case (ctest's Mpi.npN, DTRAIN_TEST_RANKS=N) must be launched as N ranks, and
//   must run all its tests or skip all of them: one ctest result cannot report that some passed
//   and others skipped, so that fails. Tests that need a GPU are cases of their own
//   (MpiCuda.npN, MpiNccl.npN), which skip as a whole where there is none.
//
// tests/test_main_test.cpp runs each kind of test and checks the outcome ctest gives it;
// docs/verification.md#test-outcome-rules states these rules for the suite's users.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/mpi.h"

namespace {

constexpr const char* kNestedVariable = "DTRAIN_TEST_NESTED";
constexpr const char* kRanksVariable = "DTRAIN_TEST_RANKS";

// Every skipped test with the reason it gave.
class SkipRecorder : public ::testing::EmptyTestEventListener {
 public:
  struct Skip {
    std::string test, reason;
  };
  const std::vector<Skip>& skips() const { return skips_; }

 private:
  // The running test is remembered here: UnitTest::current_test_info() takes the lock that
  // GoogleTest holds while it calls OnTestPartResult.
  void OnTestStart(const ::testing::TestInfo& test) override {
    current_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestEnd(const ::testing::TestInfo&) override { current_ = "(outside a test)"; }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.skipped()) skips_.push_back({current_, result.message() ? result.message() : ""});
  }
  std::string current_ = "(outside a test)";
  std::vector<Skip> skips_;
};

// The launch a multi-rank case asks for, checked before any test runs: a case that was not
// started as the ranks it names would otherwise skip every test and pass.
std::string launch_problem(int expected_ranks) {
  if (!dt::launched_by_mpi())
    return "DTRAIN_TEST_RANKS=" + std::to_string(expected_ranks) + " but no launcher started this process";
  const int ranks = dt::mpi_world(dt::Device::cpu)->size();
  if (ranks != expected_ranks)
    return "DTRAIN_TEST_RANKS=" + std::to_string(expected_ranks) + " but the job has " + std::to_string(ranks) +
           " ranks";
  return "";
}

int fail(const std::string& why) {
  std::fprintf(stderr, "dtrain tests: FAILED: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const bool nested = std::getenv(kNestedVariable) != nullptr;
  setenv(kNestedVariable, "1", 1);
  const char* ranks_variable = std::getenv(kRanksVariable);
  const int expected_ranks = ranks_variable ? std::atoi(ranks_variable) : 0;
  if (expected_ranks > 0)
    if (const std::string problem = launch_problem(expected_ranks); !problem.empty()) return fail(problem);

  auto* recorder = new SkipRecorder;  // owned by GoogleTest's listener list
  ::testing::UnitTest::GetInstance()->listeners().Append(recorder);
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (status != 0 || unit.Failed()) return 1;  // GoogleTest has printed every failure
  if (unit.test_to_run_count() == 0) return fail("no test ran: check --gtest_filter");

  if (recorder->skips().empty()) return 0;
  for (const SkipRecorder::Skip& skip : recorder->skips())
    if (skip.reason.empty()) return fail(skip.test + " skipped without saying why: GTEST_SKIP() << \"the reason\"");
  std::string reasons;
  for (const SkipRecorder::Skip& skip : recorder->skips()) reasons += "\n  " + skip.test + ": " + skip.reason;
  if (unit.successful_test_count() > 0) {
    // Some tests passed and some skipped. A direct run of many tests says so in GoogleTest's
    // summary; a multi-rank case has only one result to give, and neither would be true.
    if (expected_ranks > 0) return fail("a multi-rank case must run all its tests or none; skipped:" + reasons);
    return 0;
  }
  if (!nested)
    for (const SkipRecorder::Skip& skip : recorder->skips())
      std::printf("%s %s: %s\n", DTRAIN_SKIP_MARKER, skip.test.c_str(), skip.reason.c_str());
  return 0;
}
