// `dtrain bench tp` under mpirun: every collective tensor parallelism starts, with and without
// sequence parallelism, is the one its algorithm implies (the command fails otherwise), for a
// model whose heads, MLP and micro-batch do not split evenly and whose key/value heads are copied.
#include <gtest/gtest.h>

#include <string>

#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

TEST(BenchTp, EveryCollectiveIsTheOneItsAlgorithmImplies) {
  for (const char* recompute : {"none", "full"}) {
    const auto result = run_dtrain(str("bench tp --model llama-tiny --batch 1 --seq 15 --precision bf16 --recompute ",
                                       recompute),
                                   testing::mpirun(4));
    ASSERT_EQ(result.status, 0) << result.output;
    for (const char* heading : {"# tensor parallelism: one micro-batch", "# tensor + sequence parallelism: one",
                                "# activation bytes one more block keeps"})
      EXPECT_NE(result.output.find(heading), std::string::npos) << heading << "\n" << result.output;
  }
}

}  // namespace
}  // namespace dt
