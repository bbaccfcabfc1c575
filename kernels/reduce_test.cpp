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
