#include "kernels/gelu.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

void gelu_forward(Tensor out, Tensor inp) {
  constexpr std::string_view op = "gelu_forward";
  expect_storage_dtype(op, inp);
  expect_dtype(op, "out", out, inp.dtype, inp.device);
  expect_shape(op, "out", out, inp.shape);
  DT_DISPATCH_DEVICE(gelu_forward, inp.device, out, inp);
}

void gelu_backward(Tensor dinp, Tensor inp, Tensor dout) {
  constexpr std::string_view op = "gelu_backward";
  expect_storage_dtype(op, inp);
  expect_dtype(op, "dinp", dinp, inp.dtype, inp.device);
  expect_dtype(op, "dout", dout, inp.dtype, inp.device);
  expect_shape(op, "dinp", dinp, inp.shape);
  expect_shape(op, "dout", dout, inp.shape);
  DT_DISPATCH_DEVICE(gelu_backward, inp.device, dinp, inp, dout);
}

}  // namespace dt::kernels
