// `dtrain config show` as a user meets it: the resolved configuration and derived quantities,
// output that loads as a configuration itself, and every problem at once with exit status 1.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/testing.h"
#include "train/run_config.h"

namespace dt {
namespace {

using testing::run_dtrain;

TEST(ConfigCli, ShowPrintsTheResolvedConfigurationAndWhatItImplies) {
  const auto result = run_dtrain(str("config show ", DTRAIN_SOURCE_DIR, "/configs/gpt2-124m.toml optim.lr=3e-4 "
                                     "train.steps=1000"));
  ASSERT_EQ(result.status, 0) << result.output;
  for (const char* expected : {"[optim]\nlr               = 0.0003\n", "steps                    = 1000\n",
                               "preset             = \"gpt2-124m\"\n", "# parameters         124,439,808 (124.4M)",
                               "# global batch       512 sequences x 1024 tokens = 524,288 tokens per step"})
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << "\n" << result.output;
  // The output, comments and all, is a configuration that loads to the same thing.
  testing::TempDir dir;
  std::ofstream(dir.path() / "shown.toml") << result.output;
  EXPECT_EQ(resolved_toml(load_run_config(dir.path() / "shown.toml")),
            result.output.substr(0, result.output.find("\n# Derived quantities")));
}

// Under pipeline parallelism each pp rank's line names its stages — ZB-V's V puts the first and
// the last on rank 0, so no copy of the tied wte is needed there — and what it holds at most.
TEST(ConfigCli, ShowNamesEachPipelineRanksStages) {
  const auto result = run_dtrain(str("config show ", DTRAIN_SOURCE_DIR, "/configs/gpt2-124m.toml parallel.pp=2 "
                                     "parallel.pp_schedule=1f1b"));
  ASSERT_EQ(result.status, 0) << result.output;
  // The head's output projection (50,257 x 768) weighs as much as 4 blocks: the balance counts it.
  for (const char* expected : {"# pp rank 0          stage 0: embeddings, blocks 0-7: ",
                               "# pp rank 1          stage 1: blocks 8-11, head: ", "(with a copy of the tied wte)",
                               "up to 2 micro-batches held (1f1b)", "up to 1 micro-batch held (1f1b)"})
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << "\n" << result.output;
  // zb-v's lists wait for ever under NCCL (the config's cuda device picks it): over MPI.
  const auto v = run_dtrain(str("config show ", DTRAIN_SOURCE_DIR, "/configs/gpt2-124m.toml parallel.pp=2 "
                                "parallel.pp_schedule=zb-v parallel.backend=mpi"));
  ASSERT_EQ(v.status, 0) << v.output;
  EXPECT_NE(v.output.find("# pp rank 0          stage 0: embeddings, blocks "), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("; stage 3: block 11, head: "), std::string::npos) << v.output;
  EXPECT_EQ(v.output.find("copy of the tied wte"), std::string::npos) << v.output;
}

TEST(ConfigCli, MistakesExitNonZeroListingEveryProblem) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "bad.toml") << "[model]\npreset = \"gpt2-tiny\"\n[trian]\nsteps = 3\n";
  const auto result = run_dtrain(str("config show ", dir.file("bad.toml"), " optim.lrr=1"));
  EXPECT_EQ(result.status, 1) << result.output;
  for (const char* expected : {"has 3 problems:", "bad.toml:3: [trian]: unknown section (did you mean [train]?)",
                               "data.seq_len = 256 (default): must be in [1, model.max_seq_len = 64]",
                               "command line: optim.lrr = 1: unknown key (did you mean optim.lr?)"})
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << "\n" << result.output;
  EXPECT_NE(run_dtrain("config show").output.find("no configuration file given"), std::string::npos);
  EXPECT_NE(run_dtrain("config show x.toml --steps 3").output.find("unknown flag --steps"), std::string::npos);
  EXPECT_EQ(run_dtrain("config show --help").status, 0);
}

}  // namespace
}  // namespace dt
