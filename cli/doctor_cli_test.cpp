// `dtrain doctor` alone and under mpirun: every section, and a checked all-reduce.
#include <gtest/gtest.h>

#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

TEST(Doctor, ReportsEverySectionAndACheckedAllReduce) {
  for (const bool under_mpirun : {false, true}) {
    const auto result = run_dtrain("doctor", under_mpirun ? testing::mpirun(2) : "");
    ASSERT_EQ(result.status, 0) << result.output;
    for (const char* line : {"\nCPU     ", "\nBLAS    OpenBLAS with ", "\nMPI     ", "\nCUDA    ", "\nNCCL    ",
                             "\ncheck   all_reduce of 1 MiB f32 over "})
      EXPECT_NE(result.output.find(line), std::string::npos) << line << "\n" << result.output;
    EXPECT_NE(result.output.find(under_mpirun ? "over 2 ranks: correct" : "over 1 rank: correct"), std::string::npos)
        << result.output;
    if (under_mpirun) {
      EXPECT_NE(result.output.find("2 ranks on 1 node"), std::string::npos) << result.output;
      EXPECT_EQ(result.output.find("dtrain doctor"), result.output.rfind("dtrain doctor")) << "only rank 0 reports";
    }
  }
}

// "correct" above is the tool's own verdict. Its independent check: one element of one rank's
// result off by one (injected after the all-reduce) must be reported and fail the command, alone
// and on the rank of two that does not print.
TEST(Doctor, AWrongElementOnAnyRankIsReportedAndFails) {
  const auto alone = run_dtrain("doctor", "DTRAIN_INJECT_FAULT=collective-result-wrong@0 ");
  EXPECT_NE(alone.status, 0) << alone.output;
  EXPECT_NE(alone.output.find("over 1 rank: 1 wrong elements in "), std::string::npos) << alone.output;
  EXPECT_NE(alone.output.find("doctor: the all-reduce over 1 ranks gave 1 wrong elements, 1 of them on rank 0;"),
            std::string::npos)
      << alone.output;
  const auto two = run_dtrain("doctor", testing::mpirun(2) + "-x DTRAIN_INJECT_FAULT=collective-result-wrong@1 ");
  EXPECT_NE(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("over 2 ranks: 1 wrong elements in "), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("doctor: the all-reduce over 2 ranks gave 1 wrong elements, "), std::string::npos)
      << two.output;
}

}  // namespace
}  // namespace dt
