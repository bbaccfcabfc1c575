#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/buffer.h"

namespace dt {
namespace {

TEST(Tensor, ViewsAndSlices) {
  Buffer buffer(4 * 6 * sizeof(float), MemTag::workspace);
  Tensor t = buffer.view(DType::f32, {4, 6});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.bytes(), 96u);
  Tensor rows = t.slice_rows(1, 2);
  EXPECT_EQ(rows.shape, Shape({2, 6}));
  EXPECT_EQ(rows.ptr<float>(), t.ptr<float>() + 6);
  EXPECT_EQ(t.reshape({24}).shape.to_string(), "(24,)");
  EXPECT_THROW(t.reshape({5, 5}), Error);
  EXPECT_THROW(buffer.view(DType::f32, {5, 6}), Error);
}

}  // namespace
}  // namespace dt
