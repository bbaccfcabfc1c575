// RMSNorm over the last dimension (Llama).
//
//   rstd[n] = 1 / sqrt(sum_c inp[n, c]^2 / C + eps)
//   out[n, c] = inp[n, c] * rstd[n] * weight[c]
//
// Forward sets out and rstd; rstd is saved for backward.
// Backward accumulates: dinp += , dweight += (as layernorm_backward: dinp is usually the
// residual stream's gradient, which the other branch also adds into). dweight's sum over rows
// runs in an order fixed by N alone, so its bits do not depend on the thread count.
// Shapes: inp, out, dinp, dout (N, C); weight, dweight (C); rstd (N). out must not alias inp.
// Dtypes: inp, out, weight, dinp, dout share one storage type (f32, f64, bf16 or f16); rstd and
// dweight are f32 (f64 with f64). With 16-bit storage rstd and the gradients are computed in
// f32 from the exactly widened inputs, and out and dinp are rounded once when stored (dinp +=
// is a load, an f32 add and a rounding).
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps);
void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd);

namespace cpu {
void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps);
void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd);
}  // namespace cpu

namespace cuda {
void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps);
void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd);
}  // namespace cuda

}  // namespace dt::kernels
