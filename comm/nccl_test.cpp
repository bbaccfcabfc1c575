// The NCCL backend: every collective's result (tests/collective_checks.h), ordered with the
// compute stream. At one rank (what a one-GPU machine can check) the out-of-place collectives
// must still write their outputs; on several GPUs (MpiNccl.np2, a ctest case under mpirun) every
// result depends on every rank. Each skips, saying why, without the GPUs it needs.
#include "comm/nccl.h"

#include <gtest/gtest.h>

#include <string>

#include "comm/mpi.h"
#include "comm/single_process.h"
#include "tests/collective_checks.h"
#include "tests/cuda_testing.h"
#include "tests/mpi_testing.h"

namespace dt {
namespace {

TEST(Nccl, TheVersionIsNamedOrWhyThereIsNone) { EXPECT_FALSE(nccl_version().empty()); }

TEST(Nccl, MoreRanksOnANodeThanGpusAreRefusedNamingTheCounts) {
  EXPECT_EQ(ranks_per_node_refusal({7, 7, 9, 9}, 2), "");
  EXPECT_EQ(ranks_per_node_refusal({7}, 1), "");
  const std::string message = ranks_per_node_refusal({7, 9, 7, 7}, 2);
  EXPECT_NE(message.find("a node of this job runs 3 ranks on 2 GPUs: start at most 2 ranks per node"),
            std::string::npos)
      << message;
  EXPECT_NE(ranks_per_node_refusal({5, 5}, 1).find("runs 2 ranks on 1 GPU: start at most 1 rank per node, or use "
                                                   "parallel.backend = \"mpi\""),
            std::string::npos);
}

TEST(Nccl, OneRankCollectivesGiveTheirDefinedResults) {
  DT_SKIP_WITHOUT_CUDA();
  SingleProcessCommunicator bootstrap(Device::cpu);
  const std::unique_ptr<Communicator> world = nccl_world(bootstrap);
  EXPECT_EQ(world->size(), 1);
  testing::expect_collectives_give_their_defined_results(*world, Device::cuda);
  const std::unique_ptr<Communicator> dp = world->split(0, 0, "dp");
  EXPECT_EQ(dp->name(), "dp");
  EXPECT_EQ(dp->backend().rfind("NCCL ", 0), 0u);
  testing::expect_collectives_give_their_defined_results(*dp, Device::cuda);
}

TEST(MpiNccl, CollectivesGiveTheirDefinedResults) {
  DT_SKIP_WITHOUT_MPIRUN();
  DT_SKIP_WITHOUT_CUDA();
  const std::unique_ptr<Communicator> bootstrap = mpi_world(Device::cpu, "bootstrap");
  if (const size_t gpus = cuda_system().gpus.size(); gpus < static_cast<size_t>(bootstrap->size()))
    GTEST_SKIP() << "needs a GPU per rank (NCCL refuses two ranks of a communicator on one GPU): " << bootstrap->size()
                 << " ranks, " << gpus << " GPU(s)";
  const std::unique_ptr<Communicator> world = nccl_world(*bootstrap);
  testing::expect_collectives_give_their_defined_results(*world, Device::cuda);
}

}  // namespace
}  // namespace dt
