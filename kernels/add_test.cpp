#include "kernels/add.h"

#include <gtest/gtest.h>

#include "tests/gradcheck.h"
#include "tests/storage_testing.h"

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

// 16-bit storage: elementwise, so the bits of the f32 kernel on the widened inputs, rounded once.
// 37 * 53 elements: several chunks of the 16-bit path and a partial last one.
TEST(Add, SixteenBitStorageIsTheF32KernelOnWidenedInputsRoundedOnce) {
  using testing::max_ulp_distance;
  using testing::rounded;
  using testing::widened;
  for (const DType S : testing::kStorage16) {
    SCOPED_TRACE(dtype_name(S));
    const auto a = testing::random_storage(S, {kRows, kCols}, 81), b = testing::random_storage(S, {kRows, kCols}, 82, 0.1);
    const auto a32 = widened(a.t), b32 = widened(b.t);
    auto out = zeros(S, {kRows, kCols}), out32 = zeros(DType::f32, {kRows, kCols});
    add_forward(out.t, a.t, b.t);
    add_forward(out32.t, a32.t, b32.t);
    EXPECT_EQ(max_ulp_distance(out.t, rounded(out32.t, S).t), 0);
    add_forward(a.t, a.t, b.t);  // in place
    EXPECT_EQ(max_ulp_distance(a.t, out.t), 0);

    const auto dst32 = widened(a.t);
    accumulate(a.t, b.t);
    accumulate(dst32.t, b32.t);
    EXPECT_EQ(max_ulp_distance(a.t, rounded(dst32.t, S).t), 0);
    const auto scaled32 = widened(a.t);
    scale(a.t, 0.3);
    scale(scaled32.t, 0.3);
    EXPECT_EQ(max_ulp_distance(a.t, rounded(scaled32.t, S).t), 0);
  }
}

TEST(Add, WrongStorageCombinationsAreRejectedByName) {
  const auto a = zeros(DType::bf16, {kRows, kCols}), b = zeros(DType::f16, {kRows, kCols});
  const auto c = zeros(DType::f32, {kRows, kCols});
  std::string m = testing::error_message([&] { add_forward(a.t, a.t, b.t); });
  EXPECT_NE(m.find("add_forward: b is f16"), std::string::npos) << m;
  m = testing::error_message([&] { add_forward(c.t, a.t, a.t); });
  EXPECT_NE(m.find("add_forward: out is f32"), std::string::npos) << m;
  m = testing::error_message([&] { accumulate(a.t, c.t); });
  EXPECT_NE(m.find("accumulate: src is f32"), std::string::npos) << m;
}

}  // namespace
}  // namespace dt::kernels
