#include "kernels/linear.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {
// inp (..., C) viewed as (N, C) against weight (OC, C).
void check(std::string_view op, const Tensor& x, const char* x_name, int64_t width) {
  DT_CHECK(x.ndim() >= 1 && x.dim(-1) == width, op, ": ", x_name, " is ", x.describe(), ", expected last dim ", width);
}
}  // namespace

void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  constexpr std::string_view op = "linear_forward";
  expect_float_dtype(op, weight);
  expect_same_device_and_dtype(op, {weight, out, inp, bias}, weight.dtype);
  DT_CHECK(weight.ndim() == 2, op, ": weight ", weight.describe());
  const int64_t OC = weight.dim(0), C = weight.dim(1);
  check(op, inp, "inp", C);
  check(op, out, "out", OC);
  DT_CHECK(inp.numel() / C == out.numel() / OC, op, ": inp ", inp.describe(), " and out ", out.describe());
  if (bias.defined()) expect_shape(op, "bias", bias, {OC});
  DT_DISPATCH_DEVICE(linear_forward, weight.device, out, inp, weight, bias);
}

void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight) {
  constexpr std::string_view op = "linear_backward_input";
  expect_float_dtype(op, weight);
  expect_same_device_and_dtype(op, {weight, dinp, dout}, weight.dtype);
  DT_CHECK(weight.ndim() == 2, op, ": weight ", weight.describe());
  check(op, dout, "dout", weight.dim(0));
  check(op, dinp, "dinp", weight.dim(1));
  DT_CHECK(dinp.numel() / weight.dim(1) == dout.numel() / weight.dim(0), op, ": dinp ", dinp.describe(), " and dout ",
           dout.describe());
  DT_DISPATCH_DEVICE(linear_backward_input, weight.device, dinp, dout, weight);
}

void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp) {
  constexpr std::string_view op = "linear_backward_weight";
  expect_float_dtype(op, dweight);
  expect_same_device_and_dtype(op, {dweight, dbias, dout, inp}, dweight.dtype);
  DT_CHECK(dweight.ndim() == 2, op, ": dweight ", dweight.describe());
  const int64_t OC = dweight.dim(0), C = dweight.dim(1);
  check(op, dout, "dout", OC);
  check(op, inp, "inp", C);
  DT_CHECK(inp.numel() / C == dout.numel() / OC, op, ": inp ", inp.describe(), " and dout ", dout.describe());
  if (dbias.defined()) expect_shape(op, "dbias", dbias, {OC});
  DT_DISPATCH_DEVICE(linear_backward_weight, dweight.device, dweight, dbias, dout, inp);
}

}  // namespace dt::kernels
