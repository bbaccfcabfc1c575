#include "kernels/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
#include "tests/testing.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

// F = 53: not a multiple of the vector width; 37 rows: not a multiple of the thread count.
constexpr int64_t N = 37, F = 53;

double silu(double x) { return x / (1 + std::exp(-x)); }

TEST(SwiGlu, ForwardMatchesNaive) {
  // std 4 reaches |gate| ~ 15; the rows' first columns are pinned to +-100, far in the tails
  // where vec_exp clamps, which must give silu = x and silu = ~0 rather than inf or NaN.
  auto x = random_normal(DType::f32, {N, 2 * F}, 1, 4.0);
  x.ptr<float>()[0] = 100, x.ptr<float>()[2 * F] = -100, x.ptr<float>()[4 * F] = 90, x.ptr<float>()[6 * F] = -90;
  auto out = zeros(DType::f32, {N, F}), expected = zeros(DType::f32, {N, F});
  swiglu_forward(out.t, x.t);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f)
      expected.ptr<float>()[n * F + f] =
          static_cast<float>(silu(element(x.t, n * 2 * F + f)) * element(x.t, n * 2 * F + F + f));
  // vec_exp is within 1.4 ulp; the sigmoid and two products add a few roundings: ~1e-7 of scale.
  const double err = testing::normalized_max_error(out.t, expected.t);
  EXPECT_LE(err, 1e-6);
  std::printf("swiglu_forward f32 vs naive f64, worst normalized error: %.3g\n", err);
  for (int64_t i = 0; i < N * F; ++i) ASSERT_TRUE(std::isfinite(out.ptr<float>()[i])) << i;
}

TEST(SwiGlu, BackwardMatchesFiniteDifferencesAndSetsDinp) {
  auto x = random_normal(DType::f64, {N, 2 * F}, 2, 2.0), dout = random_normal(DType::f64, {N, F}, 3);
  auto out = zeros(DType::f64, {N, F}), dx = zeros(DType::f64, {N, 2 * F});
  // dinp is set, not accumulated: stale contents (NaN here) must not leak through.
  for (int64_t i = 0; i < N * 2 * F; ++i) dx.ptr<double>()[i] = std::numeric_limits<double>::quiet_NaN();
  swiglu_backward(dx.t, dout.t, x.t);
  auto loss = [&] {
    swiglu_forward(out.t, x.t);
    return testing::weighted_sum(out.t, dout.t);
  };
  const auto r = testing::check_gradients(loss, {{"inp", x.t, dx.t}});
  EXPECT_LE(r.worst_error, 1e-7) << r.where;  // smooth function, h = 1e-6: see layernorm_test
  std::printf("swiglu_backward vs finite differences, worst relative error: %.3g at %s\n", r.worst_error,
              r.where.c_str());
}

TEST(SwiGlu, Float32BackwardMatchesFloat64) {
  // The f32 path runs vec_exp, the f64 path std::exp: this is the check of the f32 gradient.
  auto x = random_normal(DType::f64, {N, 2 * F}, 4, 4.0), dout = random_normal(DType::f64, {N, F}, 5);
  auto dx = zeros(DType::f64, {N, 2 * F}), dx32 = zeros(DType::f32, {N, 2 * F});
  swiglu_backward(dx.t, dout.t, x.t);
  swiglu_backward(dx32.t, testing::converted(dout.t, DType::f32).t, testing::converted(x.t, DType::f32).t);
  // As the forward: vec_exp's 1.4 ulp and a few roundings, relative to the largest gradient.
  const double err = testing::normalized_max_error(dx32.t, testing::converted(dx.t, DType::f32).t);
  EXPECT_LE(err, 1e-6);
  std::printf("swiglu_backward f32 vs f64, worst normalized error: %.3g\n", err);
}

TEST(SwiGlu, RejectsBadShapesAndAliasing) {
  auto x = zeros(DType::f32, {N, 2 * F}), out = zeros(DType::f32, {N, F}), dx = zeros(DType::f32, {N, 2 * F}),
       dout = zeros(DType::f32, {N, F});
  EXPECT_NO_THROW(swiglu_forward(out.t, x.t));
  EXPECT_NO_THROW(swiglu_backward(dx.t, dout.t, x.t));
  auto odd = zeros(DType::f32, {N, 2 * F + 1});
  EXPECT_THROW(swiglu_forward(out.t, odd.t), Error);
  EXPECT_THROW(swiglu_forward(out.t.reshape({F, N}), x.t), Error);
  EXPECT_THROW(swiglu_forward(dx.t, x.t), Error);  // out (N, 2F)
  // A view (N, F) inside inp, starting past inp's first element: an overlap, not equal pointers.
  const auto inside = [](const testing::OwnedTensor& t) {
    return Tensor{.data = t.ptr<float>() + F, .dtype = DType::f32, .shape = {N, F}};
  };
  EXPECT_THROW(swiglu_forward(inside(x), x.t), Error);
  auto x64 = zeros(DType::f64, {N, 2 * F});
  EXPECT_THROW(swiglu_forward(out.t, x64.t), Error);
  EXPECT_THROW(swiglu_backward(dx.t, dout.t.reshape({F, N}), x.t), Error);
  EXPECT_THROW(swiglu_backward(out.t, dout.t, x.t), Error);  // dinp (N, F)
  EXPECT_THROW(swiglu_backward(x.t, dout.t, x.t), Error);    // dinp aliases inp
  EXPECT_THROW(swiglu_backward(dx.t, inside(dx), x.t), Error);  // dinp overlaps dout
}

// 16-bit storage: elementwise within a row, so the bits of the f32 kernel on the widened
// inputs, rounded once.
TEST(SwiGlu, SixteenBitStorageIsTheF32KernelOnWidenedInputsRoundedOnce) {
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const auto x = testing::random_storage(S, {N, 2 * F}, 71, 3.0), dout = testing::random_storage(S, {N, F}, 72);
    const auto x32 = testing::widened(x.t), dout32 = testing::widened(dout.t);
    auto out = zeros(S, {N, F}), out32 = zeros(DType::f32, {N, F});
    swiglu_forward(out.t, x.t);
    swiglu_forward(out32.t, x32.t);
    EXPECT_EQ(testing::max_ulp_distance(out.t, testing::rounded(out32.t, S).t), 0);
    auto dx = zeros(S, {N, 2 * F}), dx32 = zeros(DType::f32, {N, 2 * F});
    swiglu_backward(dx.t, dout.t, x.t);
    swiglu_backward(dx32.t, dout32.t, x32.t);
    EXPECT_EQ(testing::max_ulp_distance(dx.t, testing::rounded(dx32.t, S).t), 0);
  }
}

TEST(SwiGlu, WrongStorageCombinationsAreRejectedByName) {
  const auto x = zeros(DType::f16, {N, 2 * F}), out = zeros(DType::bf16, {N, F}), dout = zeros(DType::f16, {N, F});
  const auto dx32 = zeros(DType::f32, {N, 2 * F});
  std::string m = testing::error_message([&] { swiglu_forward(out.t, x.t); });
  EXPECT_NE(m.find("swiglu_forward: out is bf16"), std::string::npos) << m;
  m = testing::error_message([&] { swiglu_backward(dx32.t, dout.t, x.t); });
  EXPECT_NE(m.find("swiglu_backward: dinp is f32"), std::string::npos) << m;
}

}  // namespace
}  // namespace dt::kernels
