#include "tests/collective_checks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "tests/cuda_testing.h"

namespace dt::testing {
namespace {

// Rank r's element i: r * 100 + i.
std::vector<float> rank_values(int rank, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(rank * 100 + i);
  return v;
}

std::vector<float> unwritten(int n) { return std::vector<float>(static_cast<size_t>(n), kUnwritten); }

// Host values on `device`, and back.
template <typename T>
OwnedTensor on(Device device, std::vector<T>& host, DType dtype = DType::f32) {
  return copy_to({.data = host.data(), .dtype = dtype, .shape = {static_cast<int64_t>(host.size())}}, device);
}
std::vector<float> back(const OwnedTensor& t) { return host_values<float>(t.t); }

// The elements rank `from` sends rank `to` in the uneven all_to_all: 0 to 3, some none, and at
// two ranks or more none at all to the last rank, whose output is empty.
int64_t part_count(int from, int to, int ranks) { return ranks > 1 && to == ranks - 1 ? 0 : (1 + from + 2 * to) % 4; }

// Element j of that part: a distinct integer in f32, a distinct bit pattern (0x3f80 is 1.0) in
// bf16 — all_to_all moves bits, so both compare exactly. kUnwritten's bf16 is a NaN, never one.
template <typename T>
T part_element(int from, int to, int64_t j) {
  const int64_t w = 64 * from + 8 * to + j;
  if constexpr (std::is_same_v<T, float>)
    return static_cast<float>(w);
  else
    return static_cast<uint16_t>(0x3f80 + w);
}

template <typename T>
void expect_uneven_all_to_all(Communicator& world, Device device, DType dtype, T unwritten_element) {
  const int r = world.rank(), p = world.size();
  std::vector<int64_t> in_counts, expected_out_counts;
  std::vector<T> sent;
  for (int q = 0; q < p; ++q) {
    in_counts.push_back(part_count(r, q, p));
    expected_out_counts.push_back(part_count(q, r, p));
    for (int64_t j = 0; j < in_counts.back(); ++j) sent.push_back(part_element<T>(r, q, j));
  }
  EXPECT_EQ(all_to_all_counts(world, in_counts), expected_out_counts) << "all_to_all_counts";
  const int64_t received = std::accumulate(expected_out_counts.begin(), expected_out_counts.end(), int64_t{0});
  std::vector<T> got(static_cast<size_t>(received), unwritten_element);
  OwnedTensor in = on(device, sent, dtype), out = on(device, got, dtype);
  world.all_to_all(out.t, expected_out_counts, in.t, in_counts).wait();
  got = host_values<T>(out.t);
  size_t i = 0;
  for (int q = 0; q < p; ++q)
    for (int64_t j = 0; j < expected_out_counts[q]; ++j, ++i)
      EXPECT_EQ(got[i], part_element<T>(q, r, j))
          << dtype_name(dtype) << " all_to_all with uneven parts: element " << j << " from rank " << q;
}

}  // namespace

void expect_collectives_give_their_defined_results(Communicator& world, Device device) {
  const int r = world.rank(), p = world.size(), n = 6;
  const float rank_sum = static_cast<float>(100 * p * (p - 1) / 2);  // sum over q of q * 100

  std::vector<float> mine = rank_values(r, n);
  OwnedTensor sum = on(device, mine), avg = on(device, mine), max = on(device, mine);
  // Started together, waited on afterwards: three collectives in flight at once.
  CollectiveHandle h1 = world.all_reduce(sum.t, ReduceOp::sum);
  CollectiveHandle h2 = world.all_reduce(avg.t, ReduceOp::average);
  CollectiveHandle h3 = world.all_reduce(max.t, ReduceOp::max);
  h3.wait();
  h2.wait();
  h1.wait();
  const std::vector<float> sums = back(sum), avgs = back(avg), maxes = back(max);
  for (int i = 0; i < n; ++i) {
    const float total = rank_sum + static_cast<float>(p * i);
    EXPECT_EQ(sums[i], total) << "all_reduce sum, element " << i;
    EXPECT_EQ(avgs[i], total / static_cast<float>(p)) << "all_reduce average, element " << i;
    EXPECT_EQ(maxes[i], static_cast<float>((p - 1) * 100 + i)) << "all_reduce max, element " << i;
  }

  // reduce_scatter: rank r keeps part r of the sum; all_gather puts part q from rank q.
  std::vector<float> whole = rank_values(r, n * p), part = unwritten(n), gathered = unwritten(n * p);
  OwnedTensor in = on(device, whole), out = on(device, part);
  world.reduce_scatter(out.t, in.t, ReduceOp::sum).wait();
  part = back(out);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(part[i], rank_sum + static_cast<float>(p * (r * n + i))) << "reduce_scatter, element " << i;
  OwnedTensor own = on(device, mine), all = on(device, gathered);
  world.all_gather(all.t, own.t).wait();
  gathered = back(all);
  for (int q = 0; q < p; ++q)
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(gathered[q * n + i], static_cast<float>(q * 100 + i)) << "all_gather, rank " << q << "'s element " << i;

  // broadcast from the last rank; all_to_all sends part q to rank q.
  OwnedTensor b = on(device, mine);
  world.broadcast(b.t, p - 1).wait();
  EXPECT_EQ(back(b), rank_values(p - 1, n)) << "broadcast from rank " << p - 1;
  std::vector<float> from_all = unwritten(n * p);
  OwnedTensor to = on(device, whole), from = on(device, from_all);
  world.all_to_all(from.t, to.t).wait();
  from_all = back(from);
  for (int q = 0; q < p; ++q)
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(from_all[q * n + i], static_cast<float>(q * 100 + r * n + i)) << "all_to_all, from rank " << q;
  expect_uneven_all_to_all<float>(world, device, DType::f32, kUnwritten);
  expect_uneven_all_to_all<uint16_t>(world, device, DType::bf16, 0xffff);

  // A ring of sends: each rank receives its left neighbour's values. (One rank would send to
  // itself, which no backend promises without a group of calls.)
  if (p >= 2) {
    std::vector<float> got = unwritten(n);
    OwnedTensor sent = on(device, mine), received = on(device, got);
    CollectiveHandle receiving = world.recv(received.t, (r + p - 1) % p);
    world.send(sent.t, (r + 1) % p).wait();
    receiving.wait();
    EXPECT_EQ(back(received), rank_values((r + p - 1) % p, n)) << "received from rank " << (r + p - 1) % p;
  }
  world.barrier().wait();
}

}  // namespace dt::testing
