#include "kernels/layernorm.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {
// Returns C after checking every tensor against inp (N, C).
int64_t check(std::string_view op, const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  expect_storage_dtype(op, inp);
  DT_CHECK(inp.ndim() >= 1, op, ": inp ", inp.describe());
  const DType stats = accumulation_dtype(inp.dtype);
  expect_dtype(op, "weight", weight, inp.dtype, inp.device);
  expect_dtype(op, "mean", mean, stats, inp.device);
  expect_dtype(op, "rstd", rstd, stats, inp.device);
  const int64_t C = inp.dim(-1), N = inp.numel() / C;
  expect_shape(op, "weight", weight, {C});
  expect_shape(op, "mean", mean, {N});
  expect_shape(op, "rstd", rstd, {N});
  return C;
}

// The forward's checks, shared by the fused op, whose norm input is res (named inp_name).
void check_forward(std::string_view op, std::string_view inp_name, const Tensor& out, const Tensor& mean,
                   const Tensor& rstd, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  const int64_t C = check(op, inp, weight, mean, rstd);
  expect_dtype(op, "out", out, inp.dtype, inp.device);
  expect_dtype(op, "bias", bias, inp.dtype, inp.device);
  expect_shape(op, "out", out, inp.shape);
  expect_shape(op, "bias", bias, {C});
  // Rows are normalized in parallel, so out overlapping another row of inp is as wrong as out == inp.
  expect_disjoint(op, "out", out, inp_name, inp);
}

}  // namespace

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias, float eps) {
  check_forward("layernorm_forward", "inp", out, mean, rstd, inp, weight, bias);
  DT_DISPATCH_DEVICE(layernorm_forward, inp.device, out, mean, rstd, inp, weight, bias, eps);
}

void add_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b, Tensor weight,
                           Tensor bias, float eps) {
  constexpr std::string_view op = "add_layernorm_forward";
  check_forward(op, "res", out, mean, rstd, res, weight, bias);
  expect_residual_operands(op, res, out, a, b);
  DT_DISPATCH_DEVICE(add_layernorm_forward, res.device, res, out, mean, rstd, a, b, weight, bias, eps);
}

void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd) {
  constexpr std::string_view op = "layernorm_backward";
  const int64_t C = check(op, inp, weight, mean, rstd);
  expect_dtype(op, "dinp", dinp, inp.dtype, inp.device);
  expect_dtype(op, "dout", dout, inp.dtype, inp.device);
  expect_dtype(op, "dweight", dweight, accumulation_dtype(inp.dtype), inp.device);
  expect_dtype(op, "dbias", dbias, accumulation_dtype(inp.dtype), inp.device);
  expect_shape(op, "dinp", dinp, inp.shape);
  expect_shape(op, "dout", dout, inp.shape);
  expect_shape(op, "dweight", dweight, {C});
  expect_shape(op, "dbias", dbias, {C});
  DT_DISPATCH_DEVICE(layernorm_backward, inp.device, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
}

}  // namespace dt::kernels
