// LayerNorm over the last dimension.
//
//   mean[n] = sum_c inp[n, c] / C
//   rstd[n] = 1 / sqrt(sum_c (inp[n, c] - mean[n])^2 / C + eps)       (biased variance, as PyTorch)
//   out[n, c] = (inp[n, c] - mean[n]) * rstd[n] * weight[c] + bias[c]
//
// Forward sets out, mean and rstd; mean and rstd are saved for backward.
// Backward accumulates: dinp += , dweight += , dbias += (dinp is usually the residual stream's
// gradient, which the other branch also adds into).
// Shapes: inp, out, dinp, dout (N, C); weight, bias, dweight, dbias (C); mean, rstd (N).
// Dtypes: inp, out, weight, bias, dinp, dout share one storage type (f32, f64, bf16 or f16);
// mean, rstd, dweight and dbias are f32 (f64 with f64). With 16-bit storage the statistics and
// the gradients are computed in f32 from the exactly widened inputs, and out and dinp are
// rounded once when stored (dinp += is a load, an f32 add and a rounding).
// out must not overlap inp.
//
// add_layernorm_forward is the residual add fused with the forward that follows it:
//
//   res[n, c] = a[n, c] + b[n, c]     (sets res), then layernorm_forward of res into out, mean, rstd
//
// in one pass over each row, with the bits of add_forward(res, a, b) (kernels/add.h) followed by
// layernorm_forward(out, mean, rstd, res, weight, bias, eps): with 16-bit storage the sum is
// taken in f32 and rounded once into res, and the statistics and out come from the rounded
// values read back. res may alias a or b exactly (generation updates the residual stream in
// place) but not overlap them otherwise; out must overlap none of res, a and b. Shapes: res, a,
// b, out (N, C); dtypes: res, a and b in inp's storage type.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                       float eps = kLayerNormEps);
void add_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b, Tensor weight,
                           Tensor bias, float eps = kLayerNormEps);
void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd);

namespace cpu {
void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias, float eps);
void add_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b, Tensor weight,
                           Tensor bias, float eps);
void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd);
}  // namespace cpu

namespace cuda {
void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias, float eps);
void add_layernorm_forward(Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b, Tensor weight,
                           Tensor bias, float eps);
void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd);
}  // namespace cuda

}  // namespace dt::kernels
