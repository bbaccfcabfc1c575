// Reductions for the optimizer.
//
//   sum_of_squares(x) = sum_i x[i]^2, accumulated in double; the global gradient norm is the
//   square root of the sum of these over every gradient range. The same bits for every
//   thread count. all_finite(x) is false when any element is inf or NaN.
#pragma once

#include "core/tensor.h"

namespace dt::kernels {

double sum_of_squares(Tensor x);
bool all_finite(Tensor x);

namespace cpu {
double sum_of_squares(Tensor x);
bool all_finite(Tensor x);
}  // namespace cpu

namespace cuda {
double sum_of_squares(Tensor x);
bool all_finite(Tensor x);
}  // namespace cuda

}  // namespace dt::kernels
