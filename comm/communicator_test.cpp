#include "comm/communicator.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "comm/single_process.h"

namespace dt {
namespace {

Tensor view(std::vector<float>& v) { return {.data = v.data(), .dtype = DType::f32, .shape = {static_cast<int64_t>(v.size())}}; }

TEST(SingleProcessCommunicator, EveryCollectiveIsItsOneRanksResult) {
  SingleProcessCommunicator world(Device::cpu);
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  std::vector<float> a(10), b(10, 0.0f);
  std::iota(a.begin(), a.end(), 1.0f);
  const std::vector<float> original = a;
  world.all_reduce(view(a), ReduceOp::average).wait();
  EXPECT_EQ(a, original);
  world.reduce_scatter(view(b), view(a), ReduceOp::sum).wait();
  EXPECT_EQ(b, original);
  std::fill(b.begin(), b.end(), 0.0f);
  world.all_gather(view(b), view(a)).wait();
  EXPECT_EQ(b, original);
  world.broadcast(view(a), 0).wait();
  world.barrier().wait();
  const std::unique_ptr<Communicator> dp = world.split(0, 0, "dp");
  EXPECT_EQ(dp->name(), "dp");
  EXPECT_EQ(dp->size(), 1);
}

// Each collective is numbered in its group, and its description names op, size, group and number.
TEST(SingleProcessCommunicator, HandlesCarryTheCollectiveAndItsSequenceNumber) {
  SingleProcessCommunicator world(Device::cpu, "dp");
  std::vector<float> a(1024);
  CollectiveHandle first = world.all_reduce(view(a), ReduceOp::sum);
  CollectiveHandle second = world.all_gather(view(a), view(a));
  EXPECT_EQ(first.info().sequence, 1u);
  EXPECT_EQ(second.info().sequence, 2u);
  EXPECT_EQ(first.info().describe(), "all_reduce sum of 4.00 KiB f32 on dp (#1)");
  first.wait();
  first.wait();  // idempotent
  EXPECT_TRUE(first.done());
}

TEST(SingleProcessCommunicator, BadArgumentsNameTheCollectiveAndTheFix) {
  SingleProcessCommunicator world(Device::cpu);
  std::vector<float> a(8), b(4);
  auto message_of = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of([&] { world.reduce_scatter(view(b), view(a), ReduceOp::sum); }).find("must have 1 times"),
            std::string::npos);
  EXPECT_NE(message_of([&] { world.broadcast(view(a), 1); }).find("root 1 is not a rank of 'world'"),
            std::string::npos);
  EXPECT_NE(message_of([&] { world.send(view(a), 0); }).find("no other rank to send to"), std::string::npos);
  Tensor on_gpu = view(a);
  on_gpu.device = Device::cuda;
  EXPECT_NE(message_of([&] { world.all_reduce(on_gpu, ReduceOp::sum); }).find("is on cuda but the communicator"),
            std::string::npos);
}

}  // namespace
}  // namespace dt
