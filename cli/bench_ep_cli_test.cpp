// `dtrain bench ep` under mpirun: each step is reported (no time is asserted: speed is measured,
// not tested), and the run fails unless every rank's all-to-alls sent exactly the bytes its
// routing implies; a model whose experts cannot cover the ranks is refused.
#include <gtest/gtest.h>

#include <string>

#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

TEST(BenchEp, ExpertsOverRanksSendWhatTheRoutingImpliesEveryStep) {
  const auto result = run_dtrain("bench ep --model moe-tiny --seq 16 --steps 2", testing::mpirun(2));
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("4 experts (top 2) in 2 of 2 blocks over 2 ep ranks (2 a rank)"), std::string::npos)
      << result.output;
  for (const char* row : {"\n     1 ", "\n     2 "})
    EXPECT_NE(result.output.find(row), std::string::npos) << row << result.output;
  const auto dense = run_dtrain("bench ep --model llama-tiny --steps 1", testing::mpirun(2));
  EXPECT_NE(dense.status, 0);
  EXPECT_NE(dense.output.find("each of the 2 ranks holds at least one expert, and the model has 0"), std::string::npos)
      << dense.output;
}

}  // namespace
}  // namespace dt
