// The MPI backend on 2, 3 and 4 ranks: ctest runs these under mpirun (CMakeLists.txt, Mpi.np2
// ... Mpi.np4, and MpiCuda.np2 for CUDA buffers); run alone, without a launcher, they skip.
// Every collective's result: tests/collective_checks.h.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi.h"
#include "tests/mpi_testing.h"
#include "tests/collective_checks.h"
#include "tests/cuda_testing.h"

namespace dt {
namespace {

Tensor view(std::vector<float>& v) {
  return {.data = v.data(), .dtype = DType::f32, .shape = {static_cast<int64_t>(v.size())}};
}

TEST(Mpi, CollectivesGiveTheirDefinedResults) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  ASSERT_GE(world->size(), 2);
  testing::expect_collectives_give_their_defined_results(*world, Device::cpu);
}

// split: even and odd world ranks form two groups whose collectives do not mix.
TEST(Mpi, SplitGroupsReduceOnlyTheirRanks) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const int r = world->rank(), p = world->size();
  const std::unique_ptr<Communicator> group = world->split(r % 2, r, "parity");
  EXPECT_EQ(group->name(), "parity");
  EXPECT_EQ(group->size(), (p - r % 2 + 1) / 2);
  EXPECT_EQ(group->rank(), r / 2);
  std::vector<float> v{static_cast<float>(r)};
  group->all_reduce(view(v), ReduceOp::sum).wait();
  float expected = 0;
  for (int q = r % 2; q < p; q += 2) expected += static_cast<float>(q);
  EXPECT_EQ(v[0], expected);
}

TEST(Mpi, BuffersMpiCannotReduceAreRefusedByName) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  std::vector<uint16_t> halves(4);
  const Tensor t{.data = halves.data(), .dtype = DType::bf16, .shape = {4}};
  try {
    world->all_reduce(t, ReduceOp::sum);
    ADD_FAILURE() << "reduced bf16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the MPI backend reduces f32, f64"), std::string::npos) << e.what();
  }
  // Gathering needs no arithmetic: 16-bit buffers go as bytes, each rank's part in rank order.
  const int r = world->rank(), p = world->size();
  for (int i = 0; i < 4; ++i) halves[i] = static_cast<uint16_t>(0x3f80 + r * 16 + i);  // distinct bf16 bit patterns
  std::vector<uint16_t> all(4 * static_cast<size_t>(p), 0xffff);
  world->all_gather({.data = all.data(), .dtype = DType::bf16, .shape = {static_cast<int64_t>(all.size())}}, t).wait();
  for (int q = 0; q < p; ++q)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(all[q * 4 + i], 0x3f80 + q * 16 + i) << "rank " << q << "'s element " << i;
}

// Uneven all_to_all's counts are checked on every rank before anything is sent, so a bad list
// stops every rank at the same collective and leaves the group in step.
TEST(Mpi, UnevenAllToAllArgumentsAreRefusedByName) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu, "ep");
  const int p = world->size();
  std::vector<float> in(static_cast<size_t>(p)), out(static_cast<size_t>(p));
  const std::vector<int64_t> ones(static_cast<size_t>(p), 1), one_too_many(static_cast<size_t>(p + 1), 1);
  std::vector<int64_t> short_by_one = ones;
  short_by_one.back() = 0;
  const auto message_of = [](const std::function<void()>& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message_of([&] { world->all_to_all(view(out), ones, view(in), one_too_many); }),
            str("all_to_all of ", 4 * p, " B f32 on ep (#1): in_counts has ", p + 1, " counts for a group of ", p,
                "; give one per rank (part r of in goes to rank r)"));
  EXPECT_EQ(message_of([&] { world->all_to_all(view(out), short_by_one, view(in), ones); }),
            str("all_to_all of ", 4 * p, " B f32 on ep (#2): out_counts sum to ", p - 1, " elements but out f32(", p,
                ",) on cpu has ", p, "; the parts must cover it exactly"));
  EXPECT_NE(message_of([&] { all_to_all_counts(*world, one_too_many); }).find("in_counts for a group of"),
            std::string::npos);
  // MPI counts and offsets are int: a part of 2^31 elements is refused, not truncated. The
  // buffer is never read (the check comes first), so its shape may claim more than it holds.
  std::vector<int64_t> huge(static_cast<size_t>(p), 0);
  huge[0] = int64_t{1} << 31;
  uint8_t byte = 0;
  const Tensor big{.data = &byte, .dtype = DType::f8e4m3, .shape = {huge[0]}};
  EXPECT_EQ(message_of([&] { world->all_to_all(big, huge, big, huge); }),
            "all_to_all of 2.00 GiB f8e4m3 on ep (#3): part 0 of in (2147483648 elements from element 0) is past "
            "the 2147483647 that MPI's int counts and offsets reach; split the exchange over several all_to_alls");
  world->barrier().wait();  // every rank is still in step
  std::iota(in.begin(), in.end(), static_cast<float>(p * world->rank()));
  world->all_to_all(view(out), ones, view(in), ones).wait();
  for (int q = 0; q < p; ++q) EXPECT_EQ(out[q], static_cast<float>(p * q + world->rank())) << "from rank " << q;
}

// An untimed barrier waits out rank 0's work past the collective timeout without the watchdog
// ending the job (the trainer's barrier behind rank 0's checkpoint writes).
TEST(Mpi, AnUntimedBarrierWaitsOutMoreThanTheTimeout) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const double saved = collective_timeout_s();
  set_collective_timeout(0.5);
  if (world->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  world->barrier(/*timed=*/false).wait();
  set_collective_timeout(saved);
  world->barrier().wait();
}

// CUDA buffers staged through host memory: the same results as host buffers.
TEST(MpiCuda, CollectivesGiveTheirDefinedResults) {
  DT_SKIP_WITHOUT_MPIRUN();
  DT_SKIP_WITHOUT_CUDA();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cuda);
  testing::expect_collectives_give_their_defined_results(*world, Device::cuda);
}

}  // namespace
}  // namespace dt
