// SwiGLU, the gated activation of Llama's MLP.
//
// inp (N, 2F) holds the gate projection in columns [0, F) and the up projection in [F, 2F)
// (one fused GEMM computes both):
//
//   out[n, f] = silu(gate[n, f]) * up[n, f],   silu(x) = x * sigmoid(x)
//
// Forward sets out (N, F). Backward sets dinp (N, 2F) from dout (N, F) and the saved inp:
//   dgate = dout * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))),   dup = dout * silu(gate)
// out must not alias inp; dinp must not alias inp or dout.
// Dtypes: one storage type for all (f32, f64, bf16 or f16); 16-bit values are widened exactly,
// computed in f32 and rounded once when stored.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void swiglu_forward(Tensor out, Tensor inp);
void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp);

namespace cpu {
void swiglu_forward(Tensor out, Tensor inp);
void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp);
}  // namespace cpu

namespace cuda {
void swiglu_forward(Tensor out, Tensor inp);
void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp);
}  // namespace cuda

}  // namespace dt::kernels
