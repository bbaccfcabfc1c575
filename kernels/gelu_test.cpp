#include "kernels/gelu.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"
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

// 16-bit storage: elementwise, so the bits of the f32 kernel on the widened inputs, rounded once.
// 1500 elements: chunks of the 16-bit path and a partial last chunk.
TEST(Gelu, SixteenBitStorageIsTheF32KernelOnWidenedInputsRoundedOnce) {
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const auto x = testing::random_storage(S, {3, 500}, 61, 4.0), dout = testing::random_storage(S, {3, 500}, 62);
    const auto x32 = testing::widened(x.t), dout32 = testing::widened(dout.t);
    auto out = zeros(S, {3, 500}), out32 = zeros(DType::f32, {3, 500});
    gelu_forward(out.t, x.t);
    gelu_forward(out32.t, x32.t);
    EXPECT_EQ(testing::max_ulp_distance(out.t, testing::rounded(out32.t, S).t), 0);
    auto dx = zeros(S, {3, 500}), dx32 = zeros(DType::f32, {3, 500});
    gelu_backward(dx.t, x.t, dout.t);
    gelu_backward(dx32.t, x32.t, dout32.t);
    EXPECT_EQ(testing::max_ulp_distance(dx.t, testing::rounded(dx32.t, S).t), 0);
    // In place, as the contract allows: out over inp, dinp over dout.
    gelu_forward(x.t, x.t);
    EXPECT_EQ(testing::max_ulp_distance(x.t, out.t), 0);
    const auto x_again = testing::rounded(x32.t, S);  // x was just overwritten
    gelu_backward(dout.t, x_again.t, dout.t);
    EXPECT_EQ(testing::max_ulp_distance(dout.t, dx.t), 0);
  }
}

TEST(Gelu, WrongStorageCombinationsAreRejectedByName) {
  const auto x = zeros(DType::bf16, {4, 8}), out = zeros(DType::f16, {4, 8}), x64 = zeros(DType::f64, {4, 8});
  std::string m = testing::error_message([&] { gelu_forward(out.t, x.t); });
  EXPECT_NE(m.find("gelu_forward: out is f16"), std::string::npos) << m;
  m = testing::error_message([&] { gelu_backward(x.t, x.t, x64.t); });
  EXPECT_NE(m.find("gelu_backward: dout is f64"), std::string::npos) << m;
}

}  // namespace
}  // namespace dt::kernels
