// Conversion between storage types, element by element:
//
//   dst = src      (sets dst; dst and src do not overlap)
//
// f32, f64, bf16 and f16 in any combination; a narrower result is rounded to nearest even, as
// core/dtype.h converts (f64 to a 16-bit type goes through f32). The model uses it to round
// the f32 master weights into the 16-bit copy the kernels read (model/transformer.h). Shapes:
// any, equal element counts.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

void convert(Tensor dst, Tensor src);

namespace cpu {
void convert(Tensor dst, Tensor src);
}  // namespace cpu

namespace cuda {
void convert(Tensor dst, Tensor src);
}  // namespace cuda

}  // namespace dt::kernels
