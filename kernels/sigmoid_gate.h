// A branch added through a sigmoid gate, one gate value a row: Qwen-MoE's shared expert, whose
// output h joins the routed experts' a as
//
//   sigmoid_gate_forward:   out[n] = a[n] + s[n] · h[n],   s[n] = sigmoid(z[n])         (sets)
//   sigmoid_gate_backward:  dh[n] = s[n] · dout[n]                                       (sets)
//                           dz[n] = s[n] (1 - s[n]) · sum over c of dout[n, c] h[n, c]   (sets)
//
// The gradient of a is dout itself. a, h, out (N, C), dout and dh share one storage type (f32,
// f64, bf16 or f16); z and dz (N) are f32 (f64 with f64 storage): the gate's logit, computed in
// f32 as the router is. Each element is one fused multiply-add in f32 (f64), rounded once; dh
// rounded once; the sum in f32 (f64), in order on the CPU and split over a warp's lanes on a GPU,
// so dz agrees to a few ulps, and so does s: CUDA's expf against glibc's exp. out may alias a;
// no other output may overlap an input.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void sigmoid_gate_forward(Tensor out, Tensor a, Tensor h, Tensor z);
void sigmoid_gate_backward(Tensor dh, Tensor dz, Tensor dout, Tensor h, Tensor z);

namespace cpu {
void sigmoid_gate_forward(Tensor out, Tensor a, Tensor h, Tensor z);
void sigmoid_gate_backward(Tensor dh, Tensor dz, Tensor dout, Tensor h, Tensor z);
}  // namespace cpu

namespace cuda {
void sigmoid_gate_forward(Tensor out, Tensor a, Tensor h, Tensor z);
void sigmoid_gate_backward(Tensor dh, Tensor dz, Tensor dout, Tensor h, Tensor z);
}  // namespace cuda

}  // namespace dt::kernels
