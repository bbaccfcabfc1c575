#include "kernels/convert.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "tests/gradcheck.h"

namespace dt::kernels {
namespace {

using testing::OwnedTensor;

// f32 -> 16 bits rounds as core/dtype.h does (itself checked bit for bit against PyTorch), and
// 16 bits -> f32 is exact, so the round trip of a 16-bit value is the identity.
TEST(Convert, RoundsAsCoreDtypeDoesAndWidensExactly) {
  const OwnedTensor x = testing::random_normal(DType::f32, {1001}, 4, 3.0);
  for (const DType narrow : {DType::bf16, DType::f16}) {
    const OwnedTensor rounded = testing::zeros(narrow, {1001});
    convert(rounded.t, x.t);
    const OwnedTensor widened = testing::zeros(DType::f32, {1001});
    convert(widened.t, rounded.t);
    for (int64_t i = 0; i < 1001; ++i) {
      const float v = x.ptr<float>()[i];
      const uint16_t expected = narrow == DType::bf16 ? float_to_bf16(v) : float_to_f16(v);
      ASSERT_EQ(rounded.ptr<uint16_t>()[i], expected) << dtype_name(narrow) << " element " << i;
      const float back = narrow == DType::bf16 ? bf16_to_float(expected) : f16_to_float(expected);
      ASSERT_EQ(widened.ptr<float>()[i], back) << dtype_name(narrow) << " element " << i;
    }
  }
}

TEST(Convert, SizesMustAgree) {
  const OwnedTensor a = testing::zeros(DType::f32, {4}), b = testing::zeros(DType::bf16, {5});
  EXPECT_THROW(convert(b.t, a.t), Error);
}

}  // namespace
}  // namespace dt::kernels
