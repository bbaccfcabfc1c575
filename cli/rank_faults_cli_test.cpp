// A rank killed at a random moment of a 4-rank job, again and again: the job always ends (no
// rank is left waiting), no checkpoint is ever corrupt, and running the same command after each
// kill finishes the run exactly as an uninterrupted one, loss for loss and byte for byte.
//
// The moments are random: a kill lands on any rank, anywhere in the steps left (in a step, a
// collective, a save or the removal of an old checkpoint); each test prints its seed and its
// record of every kill. RANK_FAULTS_SEED=N draws the same steps and ranks again (where they land
// depends on the machine's timing too).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "tests/testing.h"
#include "tests/train_run.h"

namespace dt {
namespace {

using testing::BackgroundDtrain;
using testing::run_dtrain;
using testing::TrainRun;

constexpr int kRanks = 4;
constexpr int kSteps = 400;
constexpr double kTimeoutS = 20;  // parallel.timeout_s: the watchdog's bound on a collective

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Whether a save is under way in a run: a step directory being written (".tmp").
bool saving(const std::filesystem::path& run_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir / "checkpoints", ec))
    if (entry.path().extension() == ".tmp") return true;
  return false;
}

// Every file of the latest checkpoint, by name.
std::map<std::string, std::string> latest_files(const std::filesystem::path& run_dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(ckpt::Checkpoint::latest(run_dir / "checkpoints"))) {
    std::ifstream in(entry.path(), std::ios::binary);
    files[entry.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

// The step of the latest checkpoint of a run, 0 without one.
int64_t latest_step(const std::filesystem::path& run_dir) {
  if (!std::filesystem::exists(run_dir / "checkpoints" / "latest")) return 0;
  return ckpt::Checkpoint(ckpt::Checkpoint::latest(run_dir / "checkpoints")).step();
}

// Trains `layout` on 4 ranks straight, then kills a random rank of the same run at a random
// moment of its training `kills` times, running the same command after each, and once more to
// the end.
void expect_kills_leave_the_run_bit_for_bit(const std::string& name, const std::string& layout, int kills) {
  const TrainRun run;
  const std::string args = str("train.steps=", kSteps, " checkpoint.every=4 checkpoint.keep_last=2 eval.every=0 ",
                               "log.every=50 parallel.timeout_s=", kTimeoutS, " ", layout);
  // How long the steps take, from the first logged to the end.
  BackgroundDtrain straight(run.args("straight", args), "", testing::mpirun(kRanks));
  ASSERT_TRUE(straight.wait_while_running_until([&] { return !run.losses("straight").empty(); }, 120));
  const auto first_step = std::chrono::steady_clock::now();
  const auto straight_end = straight.wait(300);
  ASSERT_EQ(straight_end.status, 0) << straight_end.output;
  const double steps_s = seconds_since(first_step);

  const char* replay = std::getenv("RANK_FAULTS_SEED");
  const unsigned seed = replay != nullptr ? static_cast<unsigned>(std::atol(replay)) : std::random_device{}();
  std::mt19937 random(seed);
  std::printf("%s: seed %u (RANK_FAULTS_SEED=%u replays it); the uninterrupted run's %d steps took %.1f s\n",
              name.c_str(), seed, seed, kSteps, steps_s);
  std::printf("%-6s %-5s %-9s %-12s %-16s %-14s %s\n", "kill", "rank", "at step", "steps done", "during a save",
              "job ended in", "latest checkpoint");
  int landed = 0;
  for (int k = 1; k <= kills; ++k) {
    // Anywhere in the steps left: once the log shows a step drawn from them, a fraction of a
    // step later. Steps, not seconds, so that a loaded machine draws from the same range.
    const int64_t resumed = latest_step(run.path("killed"));
    const auto target = static_cast<size_t>(std::uniform_int_distribution<int64_t>(resumed + 1, kSteps - 1)(random));
    const double jitter_s = std::uniform_real_distribution<double>(0, steps_s / kSteps)(random);
    const int rank = std::uniform_int_distribution<int>(0, kRanks - 1)(random);
    // This launch's steps: metrics.jsonl rewritten since, past the checkpoint's step.
    const auto launched = std::filesystem::file_time_type::clock::now();
    BackgroundDtrain job(run.args("killed", args), "", testing::mpirun(kRanks));
    const std::filesystem::path metrics = run.path("killed") / "metrics.jsonl";
    const bool reached = job.wait_while_running_until(
        [&] {
          std::error_code ec;
          return std::filesystem::last_write_time(metrics, ec) > launched && !ec &&
                 run.losses("killed").size() >= target;
        },
        300);
    if (reached) std::this_thread::sleep_for(std::chrono::duration<double>(jitter_s));
    const size_t steps_done = run.losses("killed").size();
    const bool during_save = saving(run.path("killed"));
    // The run may end first, and between the ranks' exit and the launcher's there is no rank to kill.
    if (!reached || !job.signal_rank(rank, SIGKILL)) {
      const auto finished = job.wait(kTimeoutS + 60);
      ASSERT_EQ(finished.status, 0) << finished.output;
      std::printf("%-6d the run finished before the kill at step %zu\n", k, target);
      break;
    }
    const auto killed = std::chrono::steady_clock::now();
    const auto ended = job.wait(kTimeoutS + 60);
    const double ended_s = seconds_since(killed);
    EXPECT_FALSE(ended.timed_out) << "kill " << k << ": the job hung\n" << ended.output;
    // Every checkpoint in place is whole and every tensor in it passes its checksum (what a save
    // or a removal the kill interrupted left, ".tmp" or ".old", is not in place).
    std::string latest = "none";
    for (const auto& step : ckpt::step_directories(run.path("killed") / "checkpoints"))
      EXPECT_NO_THROW(ckpt::Checkpoint(step).verify()) << "kill " << k << ": " << step;
    if (std::filesystem::exists(run.path("killed") / "checkpoints" / "latest"))
      latest = ckpt::Checkpoint::latest(run.path("killed") / "checkpoints").filename().string();
    std::printf("%-6d %-5d %-9zu %-12zu %-16s %-12.2f s %s\n", k, rank, target, steps_done, during_save ? "yes" : "no",
                ended_s, latest.c_str());
    ++landed;
    if (latest_step(run.path("killed")) == kSteps) break;  // the kill came after the run's last save
  }
  std::printf("%s: %d kills landed, 0 hangs allowed\n", name.c_str(), landed);
  if (latest_step(run.path("killed")) < kSteps) {
    const auto last = run_dtrain(run.args("killed", args), testing::mpirun(kRanks));
    ASSERT_EQ(last.status, 0) << last.output;
  }
  EXPECT_EQ(run.losses("killed"), run.losses("straight"));
  EXPECT_TRUE(latest_files(run.path("killed")) == latest_files(run.path("straight"))) << "final checkpoints differ";
}

TEST(RankFaults, KilledDataAndTensorParallelRanksResumeBitForBit) {
  expect_kills_leave_the_run_bit_for_bit("dp 2 x tp 2", "parallel.dp=2 parallel.tp=2 parallel.zero_stage=1", 4);
}

TEST(RankFaults, KilledPipelineRanksResumeBitForBit) {
  expect_kills_leave_the_run_bit_for_bit("pp 2 x dp 2", "parallel.pp=2 parallel.dp=2", 4);
}

TEST(RankFaults, KilledRanksDuringAsynchronousSavesResumeBitForBit) {
  expect_kills_leave_the_run_bit_for_bit("dp 2 x tp 2, async saves",
                                         "parallel.dp=2 parallel.tp=2 parallel.zero_stage=1 checkpoint.async=true", 4);
}

}  // namespace
}  // namespace dt
