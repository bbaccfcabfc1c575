// `dtrain bench profile`: under mpirun it writes a profile of this machine that the planner
// loads (every field present and positive, shares at most 1); one process alone is told to run it
// under mpirun.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/hardware_profile.h"
#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

TEST(BenchProfile, UnderMpirunItWritesAProfileThePlannerLoads) {
  testing::TempDir dir;
  const std::string out = (dir.path() / "cpu-local.toml").string();
  const auto result = run_dtrain(str("bench profile --seconds 0.01 --out ", out), testing::mpirun(2));
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("wrote " + out), std::string::npos) << result.output;
  const HardwareProfile p = load_hardware_profile(out);
  EXPECT_EQ(p.name, "cpu-local");
  EXPECT_EQ(p.gpus_per_node, 2);
  EXPECT_GT(p.peak(DType::f32), 1e9);  // any CPU that runs the suite does a GFLOP/s
  EXPECT_GT(p.memory_bandwidth, 1e9);
  EXPECT_GT(p.intra_node.bandwidth, 0);
  EXPECT_EQ(p.gemm_efficiency, 1);
  for (const DType precision : {DType::bf16, DType::f16, DType::f32}) {
    EXPECT_GT(p.attention_efficiency(precision), 0);
    EXPECT_LE(p.attention_efficiency(precision), 1);
  }

  const auto alone = run_dtrain(str("bench profile --out ", out));
  EXPECT_NE(alone.status, 0);
  EXPECT_NE(alone.output.find("run it under mpirun"), std::string::npos) << alone.output;
}

}  // namespace
}  // namespace dt
