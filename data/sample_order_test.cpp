#include "data/sample_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace dt {
namespace {

std::vector<int64_t> epoch_order(const SampleOrder& order, int64_t epoch) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < order.size(); ++k) out.push_back(order.sample_at(epoch, k));
  return out;
}

TEST(SampleOrder, WithoutShufflingVisitsSamplesInOrder) {
  const SampleOrder order(7, 1, false);
  EXPECT_EQ(epoch_order(order, 3), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(SampleOrder, ShufflingIsAPermutationForAnySize) {
  for (const int64_t n : {1, 2, 3, 5, 1000, 4096, 4097}) {
    const std::vector<int64_t> order = epoch_order(SampleOrder(n, 42, true), 0);
    std::vector<bool> seen(static_cast<size_t>(n), false);
    for (const int64_t s : order) {
      ASSERT_GE(s, 0);
      ASSERT_LT(s, n);
      ASSERT_FALSE(seen[s]) << "sample " << s << " twice for n = " << n;
      seen[s] = true;
    }
  }
}

TEST(SampleOrder, DependsOnlyOnSeedEpochAndPosition) {
  const SampleOrder a(1000, 7, true), b(1000, 7, true), other_seed(1000, 8, true);
  EXPECT_EQ(epoch_order(a, 2), epoch_order(b, 2));  // any process computes the same order
  EXPECT_NE(epoch_order(a, 2), epoch_order(a, 3));  // each epoch is shuffled anew
  EXPECT_NE(epoch_order(a, 2), epoch_order(other_seed, 2));
  std::vector<int64_t> identity(1000);
  for (int64_t k = 0; k < 1000; ++k) identity[k] = k;
  EXPECT_NE(epoch_order(a, 0), identity);
}

}  // namespace
}  // namespace dt
