#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/gradcheck.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

constexpr int64_t N = 7, C = 13, OC = 11;

// fp32 against a double-accumulating loop: sgemm's blocked sums differ from the sequential
// one by a few roundings of terms ~|x||w| ~ 1 each, over K = 13 terms: ~1e-6 of the scale.
constexpr double kFp32Bound = 1e-5;
// Central differences in fp64 on a bilinear function: exact up to roundoff ~1e-10.
constexpr double kGradBound = 1e-7;

TEST(Linear, ForwardMatchesNaive) {
  auto x = random_normal(DType::f32, {N, C}, 1), w = random_normal(DType::f32, {OC, C}, 2),
       b = random_normal(DType::f32, {OC}, 3);
  auto out = zeros(DType::f32, {N, OC}), expected = zeros(DType::f32, {N, OC});
  linear_forward(out.t, x.t, w.t, b.t);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = element(b.t, o);
      for (int64_t c = 0; c < C; ++c) s += element(x.t, n * C + c) * element(w.t, o * C + c);
      expected.ptr<float>()[n * OC + o] = static_cast<float>(s);
    }
  EXPECT_LE(testing::normalized_max_error(out.t, expected.t), kFp32Bound);
}

TEST(Linear, BackwardMatchesFiniteDifferencesAndAccumulatesWeights) {
  auto x = random_normal(DType::f64, {N, C}, 4), w = random_normal(DType::f64, {OC, C}, 5),
       b = random_normal(DType::f64, {OC}, 6), dout = random_normal(DType::f64, {N, OC}, 7);
  auto out = zeros(DType::f64, {N, OC}), dx = random_normal(DType::f64, {N, C}, 8);  // dinp is set, not added
  auto dw = zeros(DType::f64, {OC, C}), db = zeros(DType::f64, {OC});
  linear_backward_input(dx.t, dout.t, w.t);
  linear_backward_weight(dw.t, db.t, dout.t, x.t);
  auto loss = [&] {
    linear_forward(out.t, x.t, w.t, b.t);
    return testing::weighted_sum(out.t, dout.t);
  };
  const auto r = testing::check_gradients(loss, {{"inp", x.t, dx.t}, {"weight", w.t, dw.t}, {"bias", b.t, db.t}});
  EXPECT_LE(r.worst_error, kGradBound) << r.where;

  // Weight gradients add into what is there: a second call doubles them (up to the rounding
  // of adding the same terms onto a non-zero start).
  auto dw2 = testing::converted(dw.t, DType::f64), db2 = testing::converted(db.t, DType::f64);
  linear_backward_weight(dw2.t, db2.t, dout.t, x.t);
  for (int64_t i = 0; i < dw.t.numel(); ++i) EXPECT_NEAR(element(dw2.t, i), 2 * element(dw.t, i), 1e-12);
  for (int64_t i = 0; i < db.t.numel(); ++i) EXPECT_NEAR(element(db2.t, i), 2 * element(db.t, i), 1e-12);
}

TEST(Linear, NoBiasAndShapeErrors) {
  auto x = random_normal(DType::f32, {N, C}, 1), w = random_normal(DType::f32, {OC, C}, 2);
  auto out = zeros(DType::f32, {N, OC});
  linear_forward(out.t, x.t, w.t, Tensor{});
  EXPECT_NEAR(out.ptr<float>()[0], [&] {
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += element(x.t, c) * element(w.t, c);
    return s;
  }(), 1e-5);
  auto wrong = zeros(DType::f32, {N, OC + 1});
  EXPECT_THROW(linear_forward(wrong.t, x.t, w.t, Tensor{}), Error);
}

}  // namespace
}  // namespace dt::kernels
