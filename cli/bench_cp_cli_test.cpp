// `dtrain bench cp` under mpirun: ring attention with plain and zig-zag chunks is reported per
// rank (no time is asserted: speed is measured, not tested), and the run fails unless every
// rank sent exactly the bytes the ring implies; too short a sequence is refused by name.
#include <gtest/gtest.h>

#include <string>

#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

TEST(BenchCp, PlainAndZigZagRingsRunAcrossProcessesAndSendWhatTheRingImplies) {
  const auto result = run_dtrain("bench cp --model llama-tiny --seq 64 --repeats 1", testing::mpirun(2));
  ASSERT_EQ(result.status, 0) << result.output;
  for (const char* row : {"    plain ", "  zig-zag ", "  cp 4:"})
    EXPECT_NE(result.output.find(row), std::string::npos) << row << "\n" << result.output;
  const auto short_seq = run_dtrain("bench cp --model llama-tiny --seq 3 --repeats 1", testing::mpirun(2));
  EXPECT_NE(short_seq.status, 0);
  EXPECT_NE(short_seq.output.find("--seq 3 must give each of the 4 zig-zag chunks a token"), std::string::npos)
      << short_seq.output;
}

}  // namespace
}  // namespace dt
