// Token dispatch and combine of a mixture-of-experts MLP: the rows of the tokens put in expert
// order for the experts' grouped GEMMs (kernels/grouped_linear.h), and the experts' outputs
// summed back per token with the routing weights.
//
// An assignment is one (token n, slot j) of the router's experts (N, k) (kernels/moe_route.h),
// numbered n * k + j. moe_dispatch lays the N * k assignments out in rows, expert by expert:
//
//   row_of (N, k) i32   the row assignment (n, j) occupies in the permuted tensors, or -1 when
//                       it is dropped (set by moe_dispatch)
//   offsets (E + 1)     returned on the host: expert e's rows are [offsets[e], offsets[e + 1]),
//                       R = offsets[E] rows in all (the grouped GEMM and an all-to-all need the
//                       counts on the host, so they come back once, here)
//   dropped (E)         returned on the host: the assignments to expert e dropped over capacity
//
// Within an expert the rows follow the assignments' order (token, then slot): a stable sort, so
// the same experts give the same rows on every device. capacity 0 is dropless: R = N * k and
// weights are not read (they may be undefined). capacity > 0 keeps at most `capacity` rows per
// expert: of an expert's assignments, those of largest routing weight (weights (N, k) f32, the
// router's), an equal weight keeping the earlier assignment and a NaN weight ranking below every
// number (moe_math::ranks_before); the kept ones are then laid out in assignment order. Experts
// must be in [0, E) (checked: the message names the first assignment outside); one token may
// name an expert twice (the router never does), and gets two rows.
//
// With that map, for x (N, C) and permuted tensors (R, C):
//
//   moe_permute_forward:     permuted[row_of[n, j]] = x[n]                        (sets; a copy)
//   moe_permute_backward:    dx[n] = sum over kept j of dpermuted[row_of[n, j]]    (sets)
//   moe_unpermute_forward:   out[n] = sum over kept j of weights[n, j] * y[row_of[n, j]]   (sets)
//   moe_unpermute_backward:  dy[row_of[n, j]] = weights[n, j] * dout[n]           (sets every row)
//                            dweights[n, j] = <dout[n], y[row_of[n, j]]>, 0 when dropped   (sets)
//
// A token whose assignments were all dropped gets out = 0 and dx = 0: the residual stream carries
// it past the layer. Every row of a permuted tensor is some kept assignment's, so dy is set
// whole.
//
// Dtypes: x, permuted, dpermuted, dx, y, out, dout and dy share one storage type (f32, f64, bf16 or
// f16); weights and dweights are f32 (f64 with f64 storage); row_of and experts are i32. The
// permute is an exact copy. The sums accumulate in f32 (f64) in slot order j = 0, 1, ..., the
// weighted ones as fused multiply-adds (w * y + acc rounded once), and a 16-bit result is rounded
// once when stored; dy is w * dout rounded once. The CPU and a GPU give the same bits for
// everything but dweights, a sum over C that a GPU splits across threads. No floating-point
// atomics: results repeat bit for bit.
//
// row_of must be moe_dispatch's for the same experts, with R the rows it returned: the kernels
// index by it without checking it again (that would read it back from a GPU on every call).
// Outputs must not overlap inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace dt::kernels {

struct MoeDispatch {
  std::vector<int64_t> offsets;  // (E + 1): expert e's rows are [offsets[e], offsets[e + 1])
  std::vector<int64_t> dropped;  // (E): assignments to expert e dropped over capacity

  int64_t rows() const { return offsets.back(); }  // R
  int64_t rows_of(int64_t expert) const { return offsets[expert + 1] - offsets[expert]; }
};

MoeDispatch moe_dispatch(Tensor row_of, Tensor experts, Tensor weights, int64_t num_experts, int64_t capacity);

void moe_permute_forward(Tensor permuted, Tensor x, Tensor row_of);
void moe_permute_backward(Tensor dx, Tensor dpermuted, Tensor row_of);
void moe_unpermute_forward(Tensor out, Tensor y, Tensor weights, Tensor row_of);
void moe_unpermute_backward(Tensor dy, Tensor dweights, Tensor dout, Tensor y, Tensor weights, Tensor row_of);

// The devices' parts of moe_dispatch: the assignments per expert, (E + 1) with those outside
// [0, E) last (checked to be none before the rows are assigned), and row_of.
namespace cpu {
std::vector<int64_t> moe_count_assignments(Tensor experts, int64_t num_experts);
void moe_assign_rows(Tensor row_of, Tensor experts, Tensor weights, int64_t num_experts, int64_t capacity);
void moe_permute_forward(Tensor permuted, Tensor x, Tensor row_of);
void moe_permute_backward(Tensor dx, Tensor dpermuted, Tensor row_of);
void moe_unpermute_forward(Tensor out, Tensor y, Tensor weights, Tensor row_of);
void moe_unpermute_backward(Tensor dy, Tensor dweights, Tensor dout, Tensor y, Tensor weights, Tensor row_of);
}  // namespace cpu

namespace cuda {
std::vector<int64_t> moe_count_assignments(Tensor experts, int64_t num_experts);
void moe_assign_rows(Tensor row_of, Tensor experts, Tensor weights, int64_t num_experts, int64_t capacity);
void moe_permute_forward(Tensor permuted, Tensor x, Tensor row_of);
void moe_permute_backward(Tensor dx, Tensor dpermuted, Tensor row_of);
void moe_unpermute_forward(Tensor out, Tensor y, Tensor weights, Tensor row_of);
void moe_unpermute_backward(Tensor dy, Tensor dweights, Tensor dout, Tensor y, Tensor weights, Tensor row_of);
}  // namespace cuda

}  // namespace dt::kernels
