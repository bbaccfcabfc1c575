// The watchdog over collectives that another backend runs (comm/mpi.h, watch_collective): the
// NCCL backend's on a GPU stream. What it watches is only a test that says whether the
// collective has ended, so a CPU job exercises the whole path: the tests below start two ranks
// of this binary under mpirun, running one of the WatchdogHelper cases (left out of ctest's
// list, CMakeLists.txt), and read what the job prints.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "comm/mpi.h"
#include "core/error.h"
#include "tests/testing.h"

namespace dt {
namespace {

constexpr const char* kHelperVariable = "DTRAIN_WATCHDOG_HELPER";

// What a GPU collective looks like to the watchdog: the first all-reduce of a group named "gpu".
CollectiveInfo gpu_all_reduce() {
  return {.op = "all_reduce sum", .group = "gpu", .sequence = 1, .bytes = 4, .dtype = DType::f32, .timed = true};
}

// A helper job's output and exit status, and how long it ran.
struct HelperJob {
  testing::CommandResult result;
  double seconds = 0;
};

// Runs the helper case `name` on two ranks of this binary.
HelperJob run_helper(const std::string& name) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const auto start = std::chrono::steady_clock::now();
  HelperJob job{.result = testing::run_command(str(testing::mpirun(2), "-x ", kHelperVariable, "=1 ", self,
                                                   " --gtest_filter=WatchdogHelper.", name))};
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return job;
}

#define DT_HELPER_ONLY() \
  if (std::getenv(kHelperVariable) == nullptr || !launched_by_mpi()) GTEST_SKIP() << "run by the MpiWatchdog tests"

// Rank 0 starts a GPU collective that never ends; rank 1 never starts it.
TEST(WatchdogHelper, OneRankWaitsOnAWatchedCollective) {
  DT_HELPER_ONLY();
  set_collective_timeout(1);
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  if (world->rank() == 0) watch_collective(gpu_all_reduce(), {0, 1}, [] { return false; });
  std::this_thread::sleep_for(std::chrono::seconds(30));  // the watchdog ends the job long before
}

// Rank 0's test of its GPU collective fails, as a CUDA error would make it.
TEST(WatchdogHelper, AWatchedCollectiveFails) {
  DT_HELPER_ONLY();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  if (world->rank() == 0)
    watch_collective(gpu_all_reduce(), {0, 1}, []() -> bool { throw Error("an illegal memory access was encountered"); });
  std::this_thread::sleep_for(std::chrono::seconds(30));
}

// A hang on the GPU is not silent either: the rank waiting in a watched collective reports it,
// naming the rank that has not started it, and the job ends with the watchdog's status.
TEST(MpiWatchdog, AWatchedCollectiveThatNeverEndsIsReportedNamingTheMissingRank) {
  const auto [result, seconds] = run_helper("OneRankWaitsOnAWatchedCollective");
  EXPECT_EQ(result.status, 3) << result.output;
  EXPECT_LT(seconds, 25) << "the job was not ended by the watchdog\n" << result.output;
  EXPECT_NE(result.output.find("dtrain: rank 0: collective watchdog: all_reduce sum of 4 B f32 on gpu (#1) has waited"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("waiting for rank 1, which has not started it"), std::string::npos) << result.output;
}

// A watched collective whose test fails ends the job at once, with the error and the collective.
TEST(MpiWatchdog, AWatchedCollectiveThatFailsEndsTheJobWithItsError) {
  const auto [result, seconds] = run_helper("AWatchedCollectiveFails");
  EXPECT_NE(result.status, 0) << result.output;
  EXPECT_LT(seconds, 25) << "the job was not ended\n" << result.output;
  EXPECT_NE(result.output.find("dtrain: rank 0: all_reduce sum of 4 B f32 on gpu (#1) failed: an illegal memory access "
                               "was encountered"),
            std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace dt
