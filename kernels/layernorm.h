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
// out must not alias inp.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                       float eps = kLayerNormEps);
void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd);

namespace cpu {
void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias, float eps);
void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd);
}  // namespace cpu

namespace cuda {
void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias, float eps);
void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                        Tensor mean, Tensor rstd);
}  // namespace cuda

}  // namespace dt::kernels
