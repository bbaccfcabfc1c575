// Reductions for the optimizer.
//
//   sum_of_squares(x) = sum_i x[i]^2, accumulated in double; the global gradient norm is the
//   square root of the sum of these over every gradient range. The same bits for every
//   thread count. all_finite(x) is false when any element is inf or NaN.
//
// The multi-tensor form sums over ranges of a flat 1-D buffer (kernels/flat_ranges.h): the
// global gradient norm in one pass and one read-back, skipping the gaps between parameters.
// Its bits depend on the ranges, never on the thread count or the GPU. The one-tensor form is
// the one-range case.
#pragma once

#include <span>

#include "core/tensor.h"
#include "kernels/flat_ranges.h"

namespace dt::kernels {

double sum_of_squares(Tensor x);
double sum_of_squares(Tensor flat, std::span<const FlatRange> ranges);
bool all_finite(Tensor x);

namespace cpu {
double sum_of_squares(Tensor flat, std::span<const FlatRange> ranges);
bool all_finite(Tensor x);
}  // namespace cpu

namespace cuda {
double sum_of_squares(Tensor flat, std::span<const FlatRange> ranges);
bool all_finite(Tensor x);
}  // namespace cuda

}  // namespace dt::kernels
