#include "kernels/add.h"

#include <gtest/gtest.h>

#include "tests/gradcheck.h"

namespace dt::kernels {
namespace {

using testing::element;
using testing::random_normal;
using testing::zeros;

// Sizes that are not multiples of any vector width or of the thread count.
constexpr int64_t kRows = 37, kCols = 53;

TEST(Add, ForwardIsElementwiseAndMayWriteOverAnInput) {
  const auto a = random_normal(DType::f32, {kRows, kCols}, 1), b = random_normal(DType::f32, {kRows, kCols}, 2);
  auto out = zeros(DType::f32, {kRows, kCols});
  add_forward(out.t, a.t, b.t);
  for (int64_t i = 0; i < out.t.numel(); ++i) ASSERT_EQ(out.ptr<float>()[i], a.ptr<float>()[i] + b.ptr<float>()[i]);
  // The residual stream is updated in place: out aliasing a.
  const auto expected = testing::converted(out.t, DType::f32);
  add_forward(a.t, a.t, b.t);
  for (int64_t i = 0; i < out.t.numel(); ++i) ASSERT_EQ(a.ptr<float>()[i], expected.ptr<float>()[i]);
}

TEST(Add, AccumulateAndScaleAreExactInDouble) {
  const auto src = random_normal(DType::f64, {kRows, kCols}, 3);
  const auto dst = random_normal(DType::f64, {kRows, kCols}, 4);
  const auto before = testing::converted(dst.t, DType::f64);
  accumulate(dst.t, src.t);
  for (int64_t i = 0; i < dst.t.numel(); ++i) ASSERT_EQ(element(dst.t, i), element(before.t, i) + element(src.t, i));
  scale(dst.t, -0.25);
  for (int64_t i = 0; i < dst.t.numel(); ++i)
    ASSERT_EQ(element(dst.t, i), -0.25 * (element(before.t, i) + element(src.t, i)));
}

TEST(Add, MismatchedShapesAreRejected) {
  const auto a = zeros(DType::f32, {kRows, kCols}), b = zeros(DType::f32, {kCols, kRows});
  EXPECT_THROW(add_forward(a.t, a.t, b.t), Error);
  EXPECT_THROW(accumulate(a.t, b.t), Error);
}

}  // namespace
}  // namespace dt::kernels
