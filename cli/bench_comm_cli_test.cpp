// `dtrain bench comm` on one process and under mpirun: every collective at every size, with no
// wrong element, the MPI peer beside it, and the fitted ring model.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

// The table's rows: collective, then "wrong" in the sixth column (sizes are two words).
int rows_with(const std::string& output, const std::string& collective, int64_t* wrong_total) {
  std::istringstream in(output);
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name, number, unit, time, algbw, busbw;
    int64_t wrong = -1;
    if (!(fields >> name >> number >> unit >> time >> algbw >> busbw >> wrong) || name != collective) continue;
    ++rows;
    *wrong_total += wrong;
  }
  return rows;
}

TEST(BenchComm, EveryCollectiveIsTimedAndCheckedOnTwoRanks) {
  const auto result = run_dtrain("bench comm --max-bytes 64K --factor 16 --seconds 0.01", testing::mpirun(2));
  ASSERT_EQ(result.status, 0) << result.output;
  for (const char* collective : {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"}) {
    int64_t wrong = 0;
    EXPECT_EQ(rows_with(result.output, collective, &wrong), 4) << collective << "\n" << result.output;  // 8 B .. 32 KiB
    EXPECT_EQ(wrong, 0) << collective;
  }
  EXPECT_NE(result.output.find("2 ranks over MPI"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("# ring fits (t = steps * alpha + factor * bytes / B): all_reduce alpha"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("# ours / MPI at the two largest sizes"), std::string::npos) << result.output;
}

TEST(BenchComm, OneProcessNeedsNoLauncherAndBadSizesAreNamed) {
  const auto alone = run_dtrain("bench comm --ops all_reduce --max-bytes 1K --factor 4 --seconds 0.01");
  ASSERT_EQ(alone.status, 0) << alone.output;
  EXPECT_NE(alone.output.find("1 rank over single process"), std::string::npos) << alone.output;
  const auto bad = run_dtrain("bench comm --max-bytes 12Q");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--max-bytes 12Q: give a size in bytes"), std::string::npos) << bad.output;
  const auto op = run_dtrain("bench comm --ops all_reduse");
  EXPECT_NE(op.output.find("unknown collective 'all_reduse'"), std::string::npos) << op.output;
}

}  // namespace
}  // namespace dt
