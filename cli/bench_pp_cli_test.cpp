// `dtrain bench pp` under mpirun: every schedule runs on the executor across processes and is
// reported with its measured bubble beside theory (no figure is asserted: speed is measured, not
// tested); a sequence longer than the model's is refused by name.
#include <gtest/gtest.h>

#include <string>

#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

TEST(BenchPp, EveryScheduleRunsAcrossProcesses) {
  const auto result = run_dtrain("bench pp --model llama-tiny --n-layer 4 --seq 16 --microbatches 4 --repeats 1",
                                 testing::mpirun(2));
  ASSERT_EQ(result.status, 0) << result.output;
  for (const char* row : {" afab ", " 1f1b ", " interleaved v2 ", " zb-h1 ", " zb-v "})
    EXPECT_NE(result.output.find(row), std::string::npos) << row << "\n" << result.output;
  const auto long_seq = run_dtrain("bench pp --model llama-tiny --seq 100 --repeats 1", testing::mpirun(2));
  EXPECT_NE(long_seq.status, 0);
  EXPECT_NE(long_seq.output.find("--seq 100 must be in [1, the model's max_seq_len 64]"), std::string::npos)
      << long_seq.output;
}

}  // namespace
}  // namespace dt
