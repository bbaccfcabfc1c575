// A rank killed at a random moment of a 4-rank job, again and again: the job always ends (no
// rank is left waiting), no checkpoint is ever corrupt, and running the same command after each
// kill finishes the run exactly as an uninterrupted one, loss for loss and byte for byte.
//
// The moments are random (a kill may land during startup, a step, a collective or a save, on
// any rank); each test prints its seed and its record of every kill. RANK_FAULTS_SEED=N replays
// a seed.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
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
constexpr double kTimeoutS = 20;  // parallel.timeout_s: the watchdog's bound on a collective

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The step directories under a run's checkpoints (complete or not), by name.
std::vector<std::filesystem::path> step_directories(const std::filesystem::path& run_dir) {
  std::vector<std::filesystem::path> steps;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir / "checkpoints", ec))
    if (entry.is_directory()) steps.push_back(entry.path());
  std::sort(steps.begin(), steps.end());
  return steps;
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

// Trains `layout` on 4 ranks straight, then kills a random rank of the same run at a random
// moment `kills` times, running the same command after each, and once more to the end.
void expect_kills_leave_the_run_bit_for_bit(const std::string& name, const std::string& layout, int kills) {
  const TrainRun run;
  const std::string args = str("train.steps=16 checkpoint.every=2 eval.every=0 parallel.timeout_s=", kTimeoutS, " ",
                               layout);
  const auto started = std::chrono::steady_clock::now();
  const auto straight = run_dtrain(run.args("straight", args), testing::mpirun(kRanks));
  ASSERT_EQ(straight.status, 0) << straight.output;
  const double straight_s = seconds_since(started);

  const char* replay = std::getenv("RANK_FAULTS_SEED");
  const unsigned seed = replay != nullptr ? static_cast<unsigned>(std::atol(replay)) : std::random_device{}();
  std::mt19937 random(seed);
  std::printf("%s: seed %u (RANK_FAULTS_SEED=%u replays it); the uninterrupted run took %.1f s\n", name.c_str(), seed,
              seed, straight_s);
  std::printf("%-6s %-5s %-9s %-12s %-16s %-14s %s\n", "kill", "rank", "after", "steps done", "during a save",
              "job ended in", "latest checkpoint");
  int landed = 0;
  for (int k = 1; k <= kills; ++k) {
    BackgroundDtrain job(run.args("killed", args), "", testing::mpirun(kRanks));
    // Anywhere from the launch to most of an uninterrupted run's length.
    const double delay = std::uniform_real_distribution<double>(0.2, 0.9 * straight_s)(random);
    const int rank = std::uniform_int_distribution<int>(0, kRanks - 1)(random);
    const auto launched = std::chrono::steady_clock::now();
    job.wait_while_running_until([&] { return seconds_since(launched) >= delay; }, delay + 1);
    if (!job.running()) {
      const auto finished = job.wait(0);
      ASSERT_EQ(finished.status, 0) << finished.output;
      std::printf("%-6d the run finished before the kill at %.2f s\n", k, delay);
      break;
    }
    const size_t steps_done = run.losses("killed").size();
    bool saving = false;
    for (const auto& step : step_directories(run.path("killed")))
      saving = saving || step.filename().string().ends_with(".tmp");
    try {
      job.signal_rank(rank, SIGKILL);
    } catch (const Error&) {
      std::printf("%-6d %-5d %-7.2f s  (the rank had not started yet: killing the launcher)\n", k, rank, delay);
      job.signal(SIGKILL);
    }
    const auto killed = std::chrono::steady_clock::now();
    const auto ended = job.wait(kTimeoutS + 60);
    const double ended_s = seconds_since(killed);
    EXPECT_FALSE(ended.timed_out) << "kill " << k << ": the job hung\n" << ended.output;
    // Every checkpoint in place is whole and every tensor in it passes its checksum.
    std::string latest = "none";
    for (const auto& step : step_directories(run.path("killed"))) {
      if (step.filename().string().ends_with(".tmp")) continue;
      EXPECT_NO_THROW(ckpt::Checkpoint(step).verify()) << "kill " << k << ": " << step;
    }
    if (std::filesystem::exists(run.path("killed") / "checkpoints" / "latest"))
      latest = ckpt::Checkpoint::latest(run.path("killed") / "checkpoints").filename().string();
    std::printf("%-6d %-5d %-7.2f s %-12zu %-16s %-12.2f s %s\n", k, rank, delay, steps_done, saving ? "yes" : "no",
                ended_s, latest.c_str());
    ++landed;
  }
  std::printf("%s: %d kills landed, 0 hangs allowed\n", name.c_str(), landed);
  const auto last = run_dtrain(run.args("killed", args), testing::mpirun(kRanks));
  ASSERT_EQ(last.status, 0) << last.output;
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
