#include "kernels/add.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

void add_forward(Tensor out, Tensor a, Tensor b) {
  constexpr std::string_view op = "add_forward";
  expect_storage_dtype(op, a);
  expect_dtype(op, "b", b, a.dtype, a.device);
  expect_dtype(op, "out", out, a.dtype, a.device);
  expect_shape(op, "b", b, a.shape);
  expect_shape(op, "out", out, a.shape);
  DT_DISPATCH_DEVICE(add_forward, a.device, out, a, b);
}

void accumulate(Tensor dst, Tensor src) {
  constexpr std::string_view op = "accumulate";
  expect_storage_dtype(op, dst);
  expect_dtype(op, "src", src, dst.dtype, dst.device);
  expect_shape(op, "src", src, dst.shape);
  DT_DISPATCH_DEVICE(accumulate, dst.device, dst, src);
}

void scale(Tensor x, double factor) {
  expect_storage_dtype("scale", x);
  DT_DISPATCH_DEVICE(scale, x.device, x, factor);
}

}  // namespace dt::kernels
