#include "kernels/linear.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {
// The two activations of a linear op, (..., width) each, viewed as (N, width): the last dims
// must be the weight's and the row counts equal.
void check_rows(std::string_view op, const Tensor& a, const char* a_name, int64_t a_width, const Tensor& b,
                const char* b_name, int64_t b_width) {
  DT_CHECK(a.ndim() >= 1 && a.dim(-1) == a_width, op, ": ", a_name, " is ", a.describe(), ", expected last dim ", a_width);
  DT_CHECK(b.ndim() >= 1 && b.dim(-1) == b_width, op, ": ", b_name, " is ", b.describe(), ", expected last dim ", b_width);
  DT_CHECK(a.numel() / a_width == b.numel() / b_width, op, ": ", a_name, " ", a.describe(), " and ", b_name, " ",
           b.describe(), " have different row counts");
}
}  // namespace

void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  constexpr std::string_view op = "linear_forward";
  expect_storage_dtype(op, weight);
  expect_dtype(op, "out", out, weight.dtype, weight.device);
  expect_dtype(op, "inp", inp, weight.dtype, weight.device);
  if (bias.defined()) expect_dtype(op, "bias", bias, weight.dtype, weight.device);
  DT_CHECK(weight.ndim() == 2, op, ": weight ", weight.describe());
  check_rows(op, inp, "inp", weight.dim(1), out, "out", weight.dim(0));
  if (bias.defined()) expect_shape(op, "bias", bias, {weight.dim(0)});
  DT_DISPATCH_DEVICE(linear_forward, weight.device, out, inp, weight, bias);
}

void linear_backward_input(Tensor dinp, Tensor dout, Tensor weight) {
  constexpr std::string_view op = "linear_backward_input";
  expect_storage_dtype(op, weight);
  expect_dtype(op, "dinp", dinp, weight.dtype, weight.device);
  expect_dtype(op, "dout", dout, weight.dtype, weight.device);
  DT_CHECK(weight.ndim() == 2, op, ": weight ", weight.describe());
  check_rows(op, dout, "dout", weight.dim(0), dinp, "dinp", weight.dim(1));
  DT_DISPATCH_DEVICE(linear_backward_input, weight.device, dinp, dout, weight);
}

void linear_backward_weight(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp) {
  constexpr std::string_view op = "linear_backward_weight";
  expect_storage_dtype(op, inp);
  expect_dtype(op, "dout", dout, inp.dtype, inp.device);
  // The weight gradients accumulate in f32 whatever the storage (f64 in the f64 tests).
  expect_dtype(op, "dweight", dweight, accumulation_dtype(inp.dtype), inp.device);
  if (dbias.defined()) expect_dtype(op, "dbias", dbias, accumulation_dtype(inp.dtype), inp.device);
  DT_CHECK(dweight.ndim() == 2, op, ": dweight ", dweight.describe());
  check_rows(op, dout, "dout", dweight.dim(0), inp, "inp", dweight.dim(1));
  if (dbias.defined()) expect_shape(op, "dbias", dbias, {dweight.dim(0)});
  DT_DISPATCH_DEVICE(linear_backward_weight, dweight.device, dweight, dbias, dout, inp);
}

void linear_backward_bias(Tensor dbias, Tensor dout) {
  constexpr std::string_view op = "linear_backward_bias";
  expect_storage_dtype(op, dout);
  expect_dtype(op, "dbias", dbias, accumulation_dtype(dout.dtype), dout.device);
  DT_CHECK(dbias.ndim() == 1 && dout.ndim() >= 1 && dout.dim(-1) == dbias.dim(0), op, ": dbias ", dbias.describe(),
           " and dout ", dout.describe(), " differ in width");
  DT_DISPATCH_DEVICE(linear_backward_bias, dout.device, dbias, dout);
}

}  // namespace dt::kernels
