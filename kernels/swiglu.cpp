#include "kernels/swiglu.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

// Checks inp (N, 2F) and returns out's shape (N, F).
Shape out_shape(std::string_view op, const Tensor& inp) {
  expect_storage_dtype(op, inp);
  DT_CHECK(inp.ndim() >= 1 && inp.dim(-1) > 0 && inp.dim(-1) % 2 == 0, op, ": inp is ", inp.describe(),
           ", expected (N, 2F): the gate projection then the up projection, so an even, positive last dim");
  Shape shape(inp.shape.begin(), inp.shape.end() - 1);
  shape.push_back(inp.dim(-1) / 2);
  return shape;
}

}  // namespace

void swiglu_forward(Tensor out, Tensor inp) {
  constexpr std::string_view op = "swiglu_forward";
  const Shape shape = out_shape(op, inp);
  expect_dtype(op, "out", out, inp.dtype, inp.device);
  expect_shape(op, "out", out, shape);
  expect_disjoint(op, "out", out, "inp", inp);
  DT_DISPATCH_DEVICE(swiglu_forward, inp.device, out, inp);
}

void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  constexpr std::string_view op = "swiglu_backward";
  const Shape shape = out_shape(op, inp);
  expect_dtype(op, "dinp", dinp, inp.dtype, inp.device);
  expect_dtype(op, "dout", dout, inp.dtype, inp.device);
  expect_shape(op, "dinp", dinp, inp.shape);
  expect_shape(op, "dout", dout, shape);
  expect_disjoint(op, "dinp", dinp, "inp", inp);
  expect_disjoint(op, "dinp", dinp, "dout", dout);
  DT_DISPATCH_DEVICE(swiglu_backward, inp.device, dinp, dout, inp);
}

}  // namespace dt::kernels
