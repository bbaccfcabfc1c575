#include "kernels/reduce.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <limits>

#include "tests/gradcheck.h"

namespace dt::kernels {
namespace {

TEST(Reduce, SumOfSquaresMatchesNaive) {
  auto x = testing::random_normal(DType::f32, {100003}, 1);
  double expected = 0;
  for (int64_t i = 0; i < x.t.numel(); ++i) expected += std::pow(static_cast<double>(x.ptr<float>()[i]), 2);
  // Accumulated in double: only the order of additions differs.
  EXPECT_NEAR(sum_of_squares(x.t), expected, 1e-12 * expected);
}

TEST(Reduce, SumOfSquaresHasTheSameBitsForAnyThreadCount) {
  const auto x = testing::random_normal(DType::f32, {100003}, 3);
  const int saved = omp_get_max_threads();
  std::vector<double> sums;
  for (const int threads : {1, 2, 3, 5}) {
    omp_set_num_threads(threads);
    sums.push_back(sum_of_squares(x.t));
  }
  omp_set_num_threads(saved);
  for (const double s : sums) EXPECT_EQ(s, sums[0]);
}

// Over ranges: each range summed as a whole tensor, the ranges' sums added in order, and the
// elements between the ranges (here huge) not counted.
TEST(Reduce, SumOfSquaresOverRangesSkipsTheGaps) {
  auto x = testing::random_normal(DType::f32, {5000}, 4);
  const std::vector<FlatRange> ranges{{3, 1000}, {1016, 4000}, {4001, 5000}};
  for (const int64_t gap : {0, 1, 2, 1000, 1001, 1015, 4000}) x.ptr<float>()[gap] = 1e30f;
  double expected = 0;
  for (const FlatRange& r : ranges) expected += sum_of_squares(x.t.slice_rows(r.begin, r.size()));
  EXPECT_EQ(sum_of_squares(x.t, ranges), expected);
  EXPECT_EQ(sum_of_squares(x.t, std::vector<FlatRange>{}), 0.0);
}

TEST(Reduce, AllFiniteDetectsInfAndNaN) {
  auto x = testing::random_normal(DType::f32, {999}, 2);
  EXPECT_TRUE(all_finite(x.t));
  x.ptr<float>()[500] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(all_finite(x.t));
  x.ptr<float>()[500] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(all_finite(x.t));
}

}  // namespace
}  // namespace dt::kernels
