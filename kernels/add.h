// Elementwise addition: the residual connection, and gradient accumulation.
//
//   add_forward:  out = a + b     (sets out; out may alias a or b)
//   accumulate:   dst += src      (the backward of a residual branch point, and summing gradients)
//   scale:        x *= factor
//
// Shapes: any, all equal. Dtypes: one storage type for all (f32, f64, bf16 or f16); 16-bit
// values are widened exactly, added or scaled in f32 (factor rounded to f32) and rounded once
// when stored.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void add_forward(Tensor out, Tensor a, Tensor b);
void accumulate(Tensor dst, Tensor src);
void scale(Tensor x, double factor);

namespace cpu {
void add_forward(Tensor out, Tensor a, Tensor b);
void accumulate(Tensor dst, Tensor src);
void scale(Tensor x, double factor);
}  // namespace cpu

namespace cuda {
void add_forward(Tensor out, Tensor a, Tensor b);
void accumulate(Tensor dst, Tensor src);
void scale(Tensor x, double factor);
}  // namespace cuda

}  // namespace dt::kernels
