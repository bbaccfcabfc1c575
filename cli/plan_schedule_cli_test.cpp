// `dtrain plan schedule`: a checked timeline, its bubble against theory, the SVG written; and
// the names and shapes it refuses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

TEST(PlanSchedule, PrintsACheckedTimelineAndWritesThePicture) {
  testing::TempDir dir;
  const std::string svg = (dir.path() / "zb.svg").string();
  const auto result = run_dtrain(str("plan schedule --pp 4 --microbatches 8 --schedule zb-h1 --svg ", svg));
  ASSERT_EQ(result.status, 0) << result.output;
  for (const char* line : {"zb-h1: 4 ranks, 8 micro-batches, 1 virtual stage per rank; checked: complete",
                           "bubble (idle over busy, the worst rank; forward, input and weight passes one unit each): "
                           "0.1250, theory 0.1250",
                           "under NCCL (a send waits until its receive runs): runs too",
                           "rank 3 | .  .  . F0 I0 F1 I1"})
    EXPECT_NE(result.output.find(line), std::string::npos) << line << "\n" << result.output;
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("<svg"), std::string::npos);
  EXPECT_NE(text.str().find(">rank 3</text>"), std::string::npos);
}

TEST(PlanSchedule, SaysWhereNcclWouldWaitForEver) {
  const auto v = run_dtrain("plan schedule --pp 2 --microbatches 4 --schedule zb-v --svg \"\"");
  ASSERT_EQ(v.status, 0) << v.output;
  EXPECT_NE(v.output.find("under NCCL (a send waits until its receive runs): zb-v (p 2, m 4, v 2): "),
            std::string::npos)
      << v.output;
  EXPECT_NE(v.output.find("waits for ever under NCCL; a run over NCCL refuses it, parallel.backend = \"mpi\" runs it"),
            std::string::npos)
      << v.output;
}

TEST(PlanSchedule, AnUnknownScheduleOrAnUnusableCountSaysWhatWorks) {
  const auto name = run_dtrain("plan schedule --schedule zb --svg \"\"");
  EXPECT_NE(name.status, 0);
  EXPECT_NE(name.output.find("no pipeline schedule named 'zb'"), std::string::npos) << name.output;
  EXPECT_NE(name.output.find("the schedules are afab, 1f1b, interleaved, zb-h1, zb-v"), std::string::npos) << name.output;
  const auto count = run_dtrain("plan schedule --pp 4 --microbatches 6 --virtual 2 --schedule interleaved --svg \"\"");
  EXPECT_NE(count.status, 0);
  EXPECT_NE(count.output.find("use 4 or 8 micro-batches"), std::string::npos) << count.output;
}

}  // namespace
}  // namespace dt
