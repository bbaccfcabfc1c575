#include "kernels/rmsnorm.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {
// Returns C after checking every tensor against inp (N, C).
int64_t check(std::string_view op, const Tensor& inp, const Tensor& weight, const Tensor& rstd) {
  expect_storage_dtype(op, inp);
  DT_CHECK(inp.ndim() >= 1 && inp.dim(-1) > 0, op, ": inp ", inp.describe(), ", expected (N, C) with C > 0");
  expect_dtype(op, "weight", weight, inp.dtype, inp.device);
  expect_dtype(op, "rstd", rstd, accumulation_dtype(inp.dtype), inp.device);
  const int64_t C = inp.dim(-1), N = inp.numel() / C;
  expect_shape(op, "weight", weight, {C});
  expect_shape(op, "rstd", rstd, {N});
  return C;
}

// The forward's checks, shared by the fused op, whose norm input is res (named inp_name).
void check_forward(std::string_view op, std::string_view inp_name, const Tensor& out, const Tensor& rstd,
                   const Tensor& inp, const Tensor& weight, float eps) {
  check(op, inp, weight, rstd);
  expect_dtype(op, "out", out, inp.dtype, inp.device);
  expect_shape(op, "out", out, inp.shape);
  // Rows are normalized in parallel, so out overlapping another row of inp is as wrong as out == inp.
  expect_disjoint(op, "out", out, inp_name, inp);
  DT_CHECK(eps >= 0, op, ": eps = ", eps, ", expected eps >= 0");
}

}  // namespace

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  check_forward("rmsnorm_forward", "inp", out, rstd, inp, weight, eps);
  DT_DISPATCH_DEVICE(rmsnorm_forward, inp.device, out, rstd, inp, weight, eps);
}

void add_rmsnorm_forward(Tensor res, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor weight, float eps) {
  constexpr std::string_view op = "add_rmsnorm_forward";
  check_forward(op, "res", out, rstd, res, weight, eps);
  expect_residual_operands(op, res, out, a, b);
  DT_DISPATCH_DEVICE(add_rmsnorm_forward, res.device, res, out, rstd, a, b, weight, eps);
}

void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd) {
  constexpr std::string_view op = "rmsnorm_backward";
  const int64_t C = check(op, inp, weight, rstd);
  expect_dtype(op, "dinp", dinp, inp.dtype, inp.device);
  expect_dtype(op, "dout", dout, inp.dtype, inp.device);
  expect_dtype(op, "dweight", dweight, accumulation_dtype(inp.dtype), inp.device);
  expect_shape(op, "dinp", dinp, inp.shape);
  expect_shape(op, "dout", dout, inp.shape);
  expect_shape(op, "dweight", dweight, {C});
  DT_DISPATCH_DEVICE(rmsnorm_backward, inp.device, dinp, dweight, dout, inp, weight, rstd);
}

}  // namespace dt::kernels
