// RMSNorm over the last dimension (Llama).
//
//   rstd[n] = 1 / sqrt(sum_c inp[n, c]^2 / C + eps)
//   out[n, c] = inp[n, c] * rstd[n] * weight[c]
//
// Forward sets out and rstd; rstd is saved for backward.
// Backward accumulates: dinp += , dweight += (as layernorm_backward: dinp is usually the
// residual stream's gradient, which the other branch also adds into). dweight's sum over rows
// runs in an order fixed by N alone, so its bits do not depend on the thread count.
// Shapes: inp, out, dinp, dout (N, C); weight, dweight (C); rstd (N). out must not overlap inp.
// Dtypes: inp, out, weight, dinp, dout share one storage type (f32, f64, bf16 or f16); rstd and
// dweight are f32 (f64 with f64). With 16-bit storage rstd and the gradients are computed in
// f32 from the exactly widened inputs, and out and dinp are rounded once when stored (dinp +=
// is a load, an f32 add and a rounding).
//
// add_rmsnorm_forward is the residual add fused with the forward that follows it:
//
//   res[n, c] = a[n, c] + b[n, c]     (sets res), then rmsnorm_forward of res into out and rstd
//
// in one pass over each row, with the bits of add_forward(res, a, b) (kernels/add.h) followed by
// rmsnorm_forward(out, rstd, res, weight, eps): with 16-bit storage the sum is taken in f32 and
// rounded once into res, and rstd and out come from the rounded values read back. res may alias
// a or b exactly (generation updates the residual stream in place) but not overlap them
// otherwise; out must overlap none of res, a and b. Shapes: res, a, b, out (N, C); dtypes: res,
// a and b in inp's storage type.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps);
void add_rmsnorm_forward(Tensor res, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor weight, float eps);
void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd);

namespace cpu {
void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps);
void add_rmsnorm_forward(Tensor res, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor weight, float eps);
void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd);
}  // namespace cpu

namespace cuda {
void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps);
void add_rmsnorm_forward(Tensor res, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor weight, float eps);
void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd);
}  // namespace cuda

}  // namespace dt::kernels
