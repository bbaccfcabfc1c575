// GELU, tanh approximation (GPT-2's "gelu_new"; PyTorch's gelu(approximate="tanh")).
//
//   out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))      (sets out; may alias inp)
//   dinp = dout * d out / d x                                         (sets dinp; may alias dout)
//
// Shapes: any, all equal. Dtypes: one storage type for all (f32, f64, bf16 or f16); 16-bit
// values are widened exactly, computed in f32 and rounded once when stored.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void gelu_forward(Tensor out, Tensor inp);
void gelu_backward(Tensor dinp, Tensor inp, Tensor dout);

namespace cpu {
void gelu_forward(Tensor out, Tensor inp);
void gelu_backward(Tensor dinp, Tensor inp, Tensor dout);
}  // namespace cpu

namespace cuda {
void gelu_forward(Tensor out, Tensor inp);
void gelu_backward(Tensor dinp, Tensor inp, Tensor dout);
}  // namespace cuda

}  // namespace dt::kernels
