// `dtrain check` under mpirun: layouts of every parallelism agree with one rank and say so; a
// missing reduction (an injected fault) is named with its step and first tensor, and the
// job's status says the layout differs; the configured model is checked when asked; errors
// name their fix.
#include <gtest/gtest.h>

#include <string>

#include "tests/testing.h"

namespace dt {
namespace {

using testing::run_dtrain;

const std::string kLlama = str(DTRAIN_SOURCE_DIR, "/configs/llama-tiny-kjv.toml");
const std::string kMoe = str(DTRAIN_SOURCE_DIR, "/configs/moe-kjv.toml");

// Whether `output` holds a row for each of the check's steps.
bool has_step_rows(const std::string& output) {
  for (const char* row : {"\n1     ", "\n2     ", "\n3     "})
    if (output.find(row) == std::string::npos) return false;
  return true;
}

TEST(CheckCli, LayoutsOfEveryParallelismAgreeWithOneRank) {
  struct Layout {
    std::string config, overrides;
    int ranks;
  };
  for (const Layout& layout :
       {Layout{kMoe, "parallel.dp=2 parallel.tp=2 parallel.ep=2 parallel.zero_stage=1 parallel.sp=true", 4},
        Layout{kLlama, "model.n_layer=4 parallel.pp=2 parallel.pp_schedule=interleaved parallel.pp_virtual=2 "
                       "train.global_batch_size=32", 2},
        Layout{kLlama, "parallel.cp=2 parallel.zero_stage=3 train.precision=bf16", 2}}) {
    const auto result = run_dtrain(str("check ", layout.config, " ", layout.overrides), testing::mpirun(layout.ranks));
    EXPECT_EQ(result.status, 0) << layout.overrides << "\n" << result.output;
    EXPECT_TRUE(has_step_rows(result.output)) << result.output;
    EXPECT_NE(result.output.find("agrees with one rank: every loss, gradient norm and parameter within the engine's "
                                 "bounds"),
              std::string::npos)
        << result.output;
  }
}

// Data parallelism leaves its first bucket (llama-tiny's untied lm_head, buckets of 0.05 MB)
// unsummed at step 2: step 1 agrees, step 2 names the norm and the tensor.
TEST(CheckCli, AMissingReductionIsNamedWithItsStepAndFirstTensor) {
  const auto result = run_dtrain(str("check ", kLlama, " parallel.dp=2"),
                                 testing::mpirun(2) + "-x DTRAIN_INJECT_FAULT=gradient-bucket-unsummed@2 ");
  EXPECT_NE(result.status, 0) << result.output;
  EXPECT_TRUE(has_step_rows(result.output)) << result.output;
  EXPECT_NE(result.output.find("DIFFERS from one rank at step 2:\n  the gradient norm: "), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("\n  first parameter lm_head: "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("\n  1 of 15 parameter tensors past their bound"), std::string::npos) << result.output;
}

TEST(CheckCli, TheConfiguredModelIsCheckedWhenAsked) {
  const auto result = run_dtrain(str("check ", kLlama, " parallel.dp=2 --model configured"), testing::mpirun(2));
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("model: the configured llama, 2 layers, d_model 48, 6 heads (2 key/value), MLP 128, "
                               "vocab 4096"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("3 steps of a global batch of 2 micro-batches of 8 x 256 tokens"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("agrees with one rank"), std::string::npos) << result.output;
}

TEST(CheckCli, ErrorsNameTheFix) {
  const auto model = run_dtrain(str("check ", kLlama, " --model big"));
  EXPECT_NE(model.status, 0);
  EXPECT_NE(model.output.find("--model big is not a choice; use small"), std::string::npos) << model.output;
  // Before anything is printed or built: the ranks the layout needs.
  const auto alone = run_dtrain(str("check ", kLlama, " parallel.dp=2"));
  EXPECT_NE(alone.status, 0);
  EXPECT_EQ(alone.output.find("checking"), std::string::npos) << alone.output;
  EXPECT_NE(alone.output.find("this job has 1 rank but the parallel layout is dp 2"), std::string::npos)
      << alone.output;
}

}  // namespace
}  // namespace dt
