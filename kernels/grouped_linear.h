// Grouped linear layer: G linear layers without bias, each applied to its own contiguous block
// of rows: the experts' projections of a mixture-of-experts MLP over the expert-ordered rows of
// kernels/moe_permute.h (group g = expert g, offsets = moe_dispatch's).
//
// For every group g, rows [offsets[g], offsets[g + 1]):
//
//   grouped_linear_forward:          out[rows]    = inp[rows] @ weight[g]^T        (sets out)
//   grouped_linear_backward_input:   dinp[rows]   = dout[rows] @ weight[g]         (sets dinp)
//   grouped_linear_backward_weight:  dweight[g]  += dout[rows]^T @ inp[rows]       (accumulates)
//
// Shapes: weight, dweight (G, OC, C); inp, dinp (R, C); out, dout (R, OC). offsets (G + 1) are
// on the host: offsets[0] = 0, non-decreasing, offsets[G] = R. An empty group costs nothing and
// leaves dweight[g] unchanged. Dtypes and rounding are linear's (kernels/linear.h): one storage
// type for inp, out, weight, dinp and dout, dweight f32 (f64 with f64), each group one call of
// the linear kernels on its row slices (cuBLASLt on a GPU, in order on the compute stream; BLAS
// or oneDNN on the CPU), so a group's result is exactly what linear gives for its rows.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace dt::kernels {

void grouped_linear_forward(Tensor out, Tensor inp, Tensor weight, std::span<const int64_t> offsets);
void grouped_linear_backward_input(Tensor dinp, Tensor dout, Tensor weight, std::span<const int64_t> offsets);
void grouped_linear_backward_weight(Tensor dweight, Tensor dout, Tensor inp, std::span<const int64_t> offsets);

}  // namespace dt::kernels
