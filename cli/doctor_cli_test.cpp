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

}  // namespace
}  // namespace dt
