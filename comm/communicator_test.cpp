#include "comm/communicator.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "comm/single_process.h"
#include "tests/collective_checks.h"
#include "tests/testing.h"

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

TEST(SingleProcessCommunicator, CollectivesGiveTheirDefinedResults) {
  SingleProcessCommunicator world(Device::cpu);
  testing::expect_collectives_give_their_defined_results(world, Device::cpu);
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
  EXPECT_NE(testing::error_of([&] { world.reduce_scatter(view(b), view(a), ReduceOp::sum); }).find("must have 1 times"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { world.broadcast(view(a), 1); }).find("root 1 is not a rank of 'world'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { world.send(view(a), 0); }).find("no other rank to send to"), std::string::npos);
  Tensor on_gpu = view(a);
  on_gpu.device = Device::cuda;
  EXPECT_NE(testing::error_of([&] { world.all_reduce(on_gpu, ReduceOp::sum); }).find("is on cuda but the communicator"),
            std::string::npos);
}

// Uneven all_to_all: one count per rank, none negative, each list covering its tensor.
TEST(SingleProcessCommunicator, UnevenAllToAllCountsAreCheckedByName) {
  SingleProcessCommunicator world(Device::cpu, "ep");
  std::vector<float> a(4), b(4);
  const std::vector<int64_t> four{4}, three{3}, two_parts{2, 2}, negative{-1};
  EXPECT_EQ(testing::error_of([&] { world.all_to_all(view(b), four, view(a), two_parts); }),
            "all_to_all of 16 B f32 on ep (#1): in_counts has 2 counts for a group of 1; give one per rank "
            "(part r of in goes to rank r)");
  EXPECT_EQ(testing::error_of([&] { world.all_to_all(view(b), three, view(a), four); }),
            "all_to_all of 16 B f32 on ep (#2): out_counts sum to 3 elements but out f32(4,) on cpu has 4; the parts "
            "must cover it exactly");
  EXPECT_NE(testing::error_of([&] { world.all_to_all(view(b), four, view(a), negative); }).find("in_counts[0] is -1"),
            std::string::npos);
  std::vector<uint16_t> halves(4);
  const Tensor bf16{.data = halves.data(), .dtype = DType::bf16, .shape = {4}};
  EXPECT_NE(testing::error_of([&] { world.all_to_all(bf16, four, view(a), four); }).find("must have one dtype"),
            std::string::npos);
  EXPECT_EQ(testing::error_of([&] { all_to_all_counts(world, two_parts); }),
            "all_to_all_counts on 'ep': 2 in_counts for a group of 1; give one per rank (the elements this rank "
            "sends it)");
  world.all_to_all(view(b), four, view(a), four).wait();  // counts that fit
  EXPECT_EQ(world.traffic(CollectiveKind::all_to_all).collectives, 1u);
}

}  // namespace
}  // namespace dt
