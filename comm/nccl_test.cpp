// The NCCL backend at one rank (what a one-GPU machine can check): every collective's result,
// ordered with the compute stream. Skips, saying why, without a GPU.
#include "comm/nccl.h"

#include <gtest/gtest.h>

#include <vector>

#include "comm/single_process.h"
#include "tests/cuda_testing.h"

namespace dt {
namespace {

TEST(Nccl, TheVersionIsNamedOrWhyThereIsNone) { EXPECT_FALSE(nccl_version().empty()); }

TEST(Nccl, OneRankCollectivesGiveTheirDefinedResults) {
  DT_SKIP_WITHOUT_CUDA();
  SingleProcessCommunicator bootstrap(Device::cpu);
  const std::unique_ptr<Communicator> world = nccl_world(bootstrap);
  EXPECT_EQ(world->size(), 1);
  std::vector<float> values{1, 2, 3, 4};
  const Tensor host{.data = values.data(), .dtype = DType::f32, .shape = {4}};
  testing::OwnedTensor a = testing::copy_to(host, Device::cuda), b = testing::copy_to(host, Device::cuda);
  world->all_reduce(a.t, ReduceOp::average).wait();
  world->all_gather(b.t, a.t).wait();
  world->broadcast(b.t, 0).wait();
  world->barrier().wait();
  const testing::OwnedTensor back = testing::copy_to(b.t, Device::cpu);  // after the compute stream's wait
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back.ptr<float>()[i], values[i]);
  const std::unique_ptr<Communicator> dp = world->split(0, 0, "dp");
  EXPECT_EQ(dp->name(), "dp");
  EXPECT_EQ(dp->backend().rfind("NCCL ", 0), 0u);
}

}  // namespace
}  // namespace dt
