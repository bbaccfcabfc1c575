// dtrain under Slurm, on a real one-node cluster of this machine (scripts/local_slurm.sh starts
// Debian's slurmctld and slurmd for the suite): srun starts the ranks through PMIx and they train
// as under mpirun, bit for bit; a batch job cancelled with scancel saves and exits as SIGTERM
// makes it, and the same command resumes it bit for bit; srun without PMIx is refused with the fix.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "tests/testing.h"
#include "tests/train_run.h"

namespace dt {
namespace {

using testing::run_command;
using testing::run_dtrain;
using testing::TrainRun;

class SlurmCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (run_command("command -v slurmctld && command -v srun").status != 0) return;
    cluster_.emplace();
    const auto started = run_command(str("bash ", DTRAIN_SOURCE_DIR, "/scripts/local_slurm.sh start ", cluster_->path()));
    ASSERT_EQ(started.status, 0) << started.output;
  }
  static void TearDownTestSuite() {
    if (cluster_) run_command(str("bash ", DTRAIN_SOURCE_DIR, "/scripts/local_slurm.sh stop ", cluster_->path()));
    cluster_.reset();
  }
  void SetUp() override {
    if (!cluster_) GTEST_SKIP() << "needs Slurm (scripts/setup.sh --tests installs Debian's slurm-wlm)";
  }
  // The environment every Slurm command of the tests runs with: this cluster, one thread a rank.
  static std::string slurm() { return str("SLURM_CONF=", cluster_->path() / "slurm.conf", " OMP_NUM_THREADS=1 "); }
  // `srun -n tasks`, in front of dtrain.
  static std::string srun(int tasks, const std::string& options = "") {
    return str(slurm(), "srun --quiet -n ", tasks, " ", options, " ");
  }

  static std::optional<testing::TempDir> cluster_;
};

std::optional<testing::TempDir> SlurmCli::cluster_;

// Two ranks started by srun train the same numbers as two started by mpirun.
TEST_F(SlurmCli, TwoRanksUnderSrunTrainLikeMpirun) {
  const TrainRun run;
  const std::string layout = "train.steps=6 checkpoint.every=3 parallel.dp=2 parallel.zero_stage=1";
  const auto mpi = run_dtrain(run.args("mpirun", layout), testing::mpirun(2));
  ASSERT_EQ(mpi.status, 0) << mpi.output;
  const auto slurm = run_dtrain(run.args("srun", layout), srun(2));
  ASSERT_EQ(slurm.status, 0) << slurm.output;
  EXPECT_NE(slurm.output.find("dp 2 × cp 1 × tp 1 × pp 1 = 2 ranks over MPI"), std::string::npos) << slurm.output;
  EXPECT_EQ(run.losses("srun"), run.losses("mpirun"));
}

// The example batch script as a cluster runs it, here on the CPU: its GPU request overridden on
// sbatch's command line, the device on dtrain's.
TEST_F(SlurmCli, TheExampleBatchScriptTrainsLikeMpirun) {
  const TrainRun run;
  const std::string layout = "train.steps=4 parallel.dp=2";
  ASSERT_EQ(run_dtrain(run.args("mpirun", layout), testing::mpirun(2)).status, 0);
  const std::string config_and_overrides = run.args("sbatch", layout + " train.device=cpu").substr(std::string("train ").size());
  const auto job = run_command(str(slurm(), "PATH=", DTRAIN_BINARY_DIR, ":$PATH timeout 300 sbatch --wait --nodes=1 ",
                                   "--ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --time=10 --output=",
                                   run.path("sbatch.out"), " ", DTRAIN_SOURCE_DIR, "/examples/slurm/train.sbatch ",
                                   config_and_overrides));
  ASSERT_EQ(job.status, 0) << job.output << run_command(str("cat ", run.path("sbatch.out"))).output;
  EXPECT_EQ(run.losses("sbatch"), run.losses("mpirun"));
}

// scancel sends the job's processes SIGTERM (and SIGKILL KillWait seconds later): the ranks
// finish the step, save and exit with status 0, and the same job again finishes the run as one
// that was never stopped.
TEST_F(SlurmCli, AJobCancelledWithScancelSavesAndResumesBitForBit) {
  const TrainRun run;
  const std::string longer = "train.steps=200 checkpoint.every=0 eval.every=0 log.every=100 parallel.dp=2";
  ASSERT_EQ(run_dtrain(run.args("straight", longer), testing::mpirun(2)).status, 0);
  const std::string output = run.path("job.out").string();
  // The ranks wait before step 100 until the signal arrives: scancel, through slurmctld, takes
  // seconds, and the steps a millisecond each.
  const auto submitted = run_command(str(slurm(), "DTRAIN_INJECT_FAULT=step-waits-for-signal@100 sbatch --parsable -n 2 ",
                                         "--output=", output, " --wrap 'srun ", DTRAIN_BINARY_DIR, "/dtrain ",
                                         run.args("cancelled", longer), "'"));
  ASSERT_EQ(submitted.status, 0) << submitted.output;
  const std::string job = submitted.output.substr(0, submitted.output.find_first_of("\n;"));
  const auto in_queue = [&] { return run_command(str(slurm(), "squeue -h -j ", job)).output.find(job) != std::string::npos; };
  ASSERT_TRUE(testing::wait_until([&] { return run.losses("cancelled").size() >= 99 || !in_queue(); }, 120));
  ASSERT_TRUE(in_queue()) << "the job ended before it was cancelled:\n" << run_command("cat " + output).output;
  ASSERT_EQ(run_command(str(slurm(), "scancel ", job)).status, 0);
  ASSERT_TRUE(testing::wait_until([&] { return !in_queue(); }, 120)) << "the job outlived scancel";
  // The node takes the next job once it has cleaned up after this one (under load a srun started
  // before then fails to launch: "Communication connection failure").
  ASSERT_TRUE(testing::wait_until(
      [&] { return run_command(str(slurm(), "sinfo -h -o %T")).output.starts_with("idle"); }, 120));
  const std::string log = run_command("cat " + output).output;
  EXPECT_NE(log.find("received SIGTERM during step 100"), std::string::npos) << log;
  EXPECT_NE(log.find("saved checkpoint "), std::string::npos) << log;
  ASSERT_EQ(run.losses("cancelled").size(), 100u) << "the run did not stop after the step the signal came in";
  const auto resumed = run_dtrain(run.args("cancelled", longer), srun(2));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from "), std::string::npos) << resumed.output;
  EXPECT_EQ(run.losses("cancelled"), run.losses("straight"));
}

// Without PMIx srun starts each task as a job of one, which would train alone: refused, with the
// option that fixes it.
TEST_F(SlurmCli, SrunWithoutPmixIsRefusedWithTheFix) {
  const TrainRun run;
  const auto result = run_dtrain(run.args("none", "train.steps=2 parallel.dp=2"), srun(2, "--mpi=none"));
  EXPECT_NE(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("srun started 2 tasks without MPI's process management (PMIx)"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("srun --mpi=pmix"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace dt
