#include "kernels/gelu.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

double gelu_naive(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

TEST(Gelu, ForwardMatchesTanhFormula) {
  // Includes the tails (|x| up to ~12), where the sigmoid form must saturate cleanly.
  auto x = random_normal(DType::f32, {1031}, 1, 3.0);
  auto out = zeros(DType::f32, {1031}), expected = zeros(DType::f32, {1031});
  gelu_forward(out.t, x.t);
  for (int64_t i = 0; i < 1031; ++i) expected.ptr<float>()[i] = static_cast<float>(gelu_naive(element(x.t, i)));
  // vec_exp is within 1.4 ulp, and the sigmoid adds a few roundings: ~1e-7 of the scale.
  EXPECT_LE(testing::normalized_max_error(out.t, expected.t), 1e-6);
  for (int64_t i = 0; i < 1031; ++i) ASSERT_TRUE(std::isfinite(out.ptr<float>()[i]));
}

TEST(Gelu, BackwardMatchesFiniteDifferencesInPlace) {
  auto x = random_normal(DType::f64, {211}, 2, 2.0), dout = random_normal(DType::f64, {211}, 3);
  auto out = zeros(DType::f64, {211});
  auto dx = testing::converted(dout.t, DType::f64);
  gelu_backward(dx.t, x.t, dx.t);  // dinp may alias dout
  auto loss = [&] {
    gelu_forward(out.t, x.t);
    return testing::weighted_sum(out.t, dout.t);
  };
  const auto r = testing::check_gradients(loss, {{"inp", x.t, dx.t}});
  EXPECT_LE(r.worst_error, 1e-7) << r.where;  // smooth function, h = 1e-6: see layernorm_test
}

}  // namespace
}  // namespace dt::kernels
