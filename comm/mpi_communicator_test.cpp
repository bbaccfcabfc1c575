// The MPI backend on 2, 3 and 4 ranks: ctest runs these under mpirun (CMakeLists.txt, Mpi.np2
// ... Mpi.np4, and MpiCuda.np2 for CUDA buffers); run alone, without a launcher, they skip.
// Values are small integers in f32, so every sum is exact and every result is checked for
// equality.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/mpi.h"
#include "tests/mpi_testing.h"
#include "tests/cuda_testing.h"

namespace dt {
namespace {

Tensor view(std::vector<float>& v, Device device = Device::cpu) {
  return {.data = v.data(), .dtype = DType::f32, .shape = {static_cast<int64_t>(v.size())}, .device = device};
}

// Rank r's element i: r * 100 + i.
std::vector<float> rank_values(int rank, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(rank * 100 + i);
  return v;
}

TEST(Mpi, CollectivesGiveTheirDefinedResults) {
  DT_SKIP_WITHOUT_MPIRUN();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cpu);
  const int r = world->rank(), p = world->size(), n = 6;
  ASSERT_GE(p, 2);

  std::vector<float> sum = rank_values(r, n), avg = rank_values(r, n), max = rank_values(r, n);
  // Started together, waited on afterwards: three collectives in flight at once.
  CollectiveHandle h1 = world->all_reduce(view(sum), ReduceOp::sum);
  CollectiveHandle h2 = world->all_reduce(view(avg), ReduceOp::average);
  CollectiveHandle h3 = world->all_reduce(view(max), ReduceOp::max);
  h3.wait();
  h2.wait();
  h1.wait();
  for (int i = 0; i < n; ++i) {
    const float total = static_cast<float>(100 * p * (p - 1) / 2 + p * i);
    EXPECT_EQ(sum[i], total);
    EXPECT_EQ(avg[i], total / static_cast<float>(p));
    EXPECT_EQ(max[i], static_cast<float>((p - 1) * 100 + i));
  }

  // reduce_scatter: rank r keeps part r of the sum; all_gather puts part q from rank q.
  std::vector<float> in = rank_values(r, n * p), part(n);
  world->reduce_scatter(view(part), view(in), ReduceOp::sum).wait();
  for (int i = 0; i < n; ++i) EXPECT_EQ(part[i], static_cast<float>(100 * p * (p - 1) / 2 + p * (r * n + i)));
  std::vector<float> mine = rank_values(r, n), gathered(n * p);
  world->all_gather(view(gathered), view(mine)).wait();
  for (int q = 0; q < p; ++q)
    for (int i = 0; i < n; ++i) EXPECT_EQ(gathered[q * n + i], static_cast<float>(q * 100 + i));

  // broadcast from the last rank; all_to_all sends part q to rank q.
  std::vector<float> b = rank_values(r, n);
  world->broadcast(view(b), p - 1).wait();
  EXPECT_EQ(b, rank_values(p - 1, n));
  std::vector<float> to_all = rank_values(r, n * p), from_all(n * p);
  world->all_to_all(view(from_all), view(to_all)).wait();
  for (int q = 0; q < p; ++q)
    for (int i = 0; i < n; ++i) EXPECT_EQ(from_all[q * n + i], static_cast<float>(q * 100 + r * n + i));

  // A ring of sends: each rank receives its left neighbour's values.
  std::vector<float> out = rank_values(r, n), got(n);
  CollectiveHandle receiving = world->recv(view(got), (r + p - 1) % p);
  world->send(view(out), (r + 1) % p).wait();
  receiving.wait();
  EXPECT_EQ(got, rank_values((r + p - 1) % p, n));
  world->barrier().wait();
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
TEST(MpiCuda, BuffersGoThroughHostMemory) {
  DT_SKIP_WITHOUT_MPIRUN();
  DT_SKIP_WITHOUT_CUDA();
  const std::unique_ptr<Communicator> world = mpi_world(Device::cuda);
  const int r = world->rank(), p = world->size(), n = 5;
  std::vector<float> host = rank_values(r, n);
  testing::OwnedTensor gpu = testing::copy_to(view(host), Device::cuda);
  world->all_reduce(gpu.t, ReduceOp::sum).wait();
  const testing::OwnedTensor back = testing::copy_to(gpu.t, Device::cpu);
  for (int i = 0; i < n; ++i) EXPECT_EQ(back.ptr<float>()[i], static_cast<float>(100 * p * (p - 1) / 2 + p * i));
}

}  // namespace
}  // namespace dt
