// Stop signals and `dtrain train` (train/stop_request.h; docs/training.md, "Checkpoints and resuming" and
// "Several processes"): SIGINT or SIGTERM finishes the step in progress, saves and exits with
// status 0; a second signal ends the process at once; a signal to any rank of a multi-rank job
// stops every rank after the same step. That the saved run resumes bit for bit is
// cli/train_cli_test.cpp's.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "ckpt/checkpoint.h"
#include "tests/testing.h"
#include "tests/train_run.h"

namespace dt {
namespace {

using testing::BackgroundDtrain;
using testing::TrainRun;

// More steps than any run below reaches before its signal (a few), so one that ignores the
// signal runs on past where the test expects it to stop; few enough that it ends in seconds.
constexpr size_t kSteps = 400;
const std::string kRun = str("train.steps=", kSteps, " checkpoint.every=0 eval.every=0");

// A run that SIGINT stopped: status 0, the message, and a whole checkpoint of its last logged
// step, which it returns.
size_t expect_stopped_by_sigint_and_saved(const TrainRun& run, const testing::BackgroundResult& result) {
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.status, 0) << result.output;
  const size_t last = run.losses("run").size();
  EXPECT_LT(last, kSteps) << "the run was not stopped";
  EXPECT_NE(result.output.find(str("received SIGINT during step ", last,
                                   ": saving a checkpoint and stopping; run the same command to resume")),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find(str("step ", last + 1, "/")), std::string::npos) << result.output;
  const ckpt::Checkpoint saved(ckpt::Checkpoint::latest(run.path("run") / "checkpoints"));  // throws if none
  EXPECT_EQ(saved.step(), static_cast<int64_t>(last));
  saved.verify();
  return last;
}

// SIGINT, as a person at the terminal sends it. The run is paused (SIGSTOP) while it is sent,
// after its log shows a step: the signal then arrives either at that step's very end or during
// the next one, and the run stops after one of those two, no later.
TEST(SignalCli, SigintFinishesTheStepInProgressSavesItAndExitsWithZero) {
  const TrainRun run;
  BackgroundDtrain training(run.args("run", kRun));
  ASSERT_TRUE(training.wait_while_running_until([&] { return run.losses("run").size() >= 3; }, 120)) << training.wait(0).output;
  training.pause();
  const size_t logged = run.losses("run").size();
  training.signal(SIGINT);
  training.resume();
  const auto result = training.wait(60);  // a step and a save: seconds at most
  const size_t last = expect_stopped_by_sigint_and_saved(run, result);
  EXPECT_TRUE(last == logged || last == logged + 1) << "logged step " << logged << " when signalled, stopped after "
                                                    << last;
}

// A second signal ends the process at once, by the signal's default action, where the first
// would have it finish what it is doing. The first arrives during step 2's checkpoint write,
// which DTRAIN_INJECT_FAULT stalls for a minute after the tensors; the second ends the process
// there, and step 2's checkpoint is never completed.
TEST(SignalCli, ASecondSignalEndsTheProcessAtOnce) {
  const TrainRun run;
  BackgroundDtrain training(run.args("run", "train.steps=4 checkpoint.every=2 eval.every=0"),
                            "DTRAIN_INJECT_FAULT=checkpoint-write-stalls@2");
  const auto partial = run.path("run") / "checkpoints" / "step_000000002.tmp" / "tensors.safetensors";
  ASSERT_TRUE(training.wait_while_running_until([&] { return std::filesystem::exists(partial); }, 120)) << training.wait(0).output;
  training.signal(SIGINT);
  // Signals of one kind do not queue: sent before the first is delivered, the second would be
  // the same one.
  ASSERT_TRUE(testing::wait_until([&] { return !training.signal_pending(SIGINT); }, 60));
  training.signal(SIGINT);
  // Ending takes milliseconds; a process that waited out the stall would take a minute.
  const auto result = training.wait(30);
  EXPECT_FALSE(result.timed_out) << "the second signal did not end the process\n" << result.output;
  EXPECT_EQ(result.signal, SIGINT) << result.output;
  EXPECT_EQ(run.losses("run").size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(run.path("run") / "checkpoints" / "latest")) << result.output;
}

// A signal to rank 1 of a two-rank ZeRO job, not to rank 0, which logs: every rank stops after
// the same step. Each rank writes its own part of a ZeRO checkpoint into the directory of the
// step it stopped after, so a whole checkpoint of rank 0's last step holds rank 1's part of that
// step; mpirun's status 0 says that both exited with 0. A rank left running would wait in a
// collective: parallel.timeout_s ends the job then.
TEST(SignalCli, ASignalToOneRankStopsEveryRankAfterTheSameStep) {
  const TrainRun run;
  BackgroundDtrain training(run.args("run", kRun + " parallel.dp=2 parallel.zero_stage=1 parallel.timeout_s=5"), "",
                            testing::mpirun(2));
  ASSERT_TRUE(training.wait_while_running_until([&] { return run.losses("run").size() >= 2; }, 120)) << training.wait(0).output;
  ASSERT_TRUE(training.signal_rank(1, SIGINT)) << training.wait(0).output;
  const auto result = training.wait(60);  // a step and a save: seconds at most
  const size_t last = expect_stopped_by_sigint_and_saved(run, result);
  EXPECT_GE(last, 2u);
  EXPECT_TRUE(std::filesystem::exists(ckpt::Checkpoint::latest(run.path("run") / "checkpoints") /
                                      "tensors_00001_of_00002.safetensors"));
}

}  // namespace
}  // namespace dt
