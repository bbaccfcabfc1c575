// Cross-entropy over a vocabulary split across the ranks of a tensor-parallel group (Megatron's
// vocabulary-parallel cross-entropy), without any rank holding a whole row of logits.
//
// Each rank holds logits (N, Vp_r) for the vocabulary's ids [first_id, first_id + rows) (its
// slice; columns [rows, Vp_r) are padding, never read). Two steps, with one all-gather between:
//
//   vocab_slice_statistics   stats (N, 3) of this rank's slice, per row: its maximum m, the sum
//                            s of exp(x - m), and the target's logit when the target is in the
//                            slice (else 0).
//   (all-gather: every rank's stats, (R, N, 3) in rank order)
//   vocab_parallel_cross_entropy
//                            merges the ranks' stats in rank order — M = max_r m_r,
//                            S = sum_r s_r exp(m_r - M), x_t = sum_r t_r — and sets
//                            losses[n] = log S + M - x_t, 0 where ignored; with the gradient it
//                            overwrites this rank's logits with loss_scale * (exp(x - M) / S -
//                            [id == target]), zero in padding columns and ignored rows.
//
// Every rank merges the same gathered stats in the same order, so the losses are the same bits
// on every rank. On one rank the result is kernels/cross_entropy.h's up to the order of the sum
// of exponentials.
// Dtypes: logits f32, f64, bf16 or f16; stats and losses f32 (f64 with f64). 16-bit logits are
// widened exactly and the gradient rounded once, as in kernels/cross_entropy.h.
// targets (N) i32: an id of the whole vocabulary, or the ignore index.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cross_entropy.h"

namespace dt::kernels {

void vocab_slice_statistics(Tensor stats, Tensor logits, Tensor targets, int64_t first_id, int64_t rows,
                            int32_t ignore_index = kIgnoreIndex);
void vocab_parallel_cross_entropy(Tensor losses, Tensor logits, Tensor all_stats, Tensor targets, int64_t first_id,
                                  int64_t rows, bool with_gradient, float loss_scale,
                                  int32_t ignore_index = kIgnoreIndex);

namespace cpu {
void vocab_slice_statistics(Tensor stats, Tensor logits, Tensor targets, int64_t first_id, int64_t rows,
                            int32_t ignore_index);
void vocab_parallel_cross_entropy(Tensor losses, Tensor logits, Tensor all_stats, Tensor targets, int64_t first_id,
                                  int64_t rows, bool with_gradient, float loss_scale, int32_t ignore_index);
}  // namespace cpu
namespace cuda {
void vocab_slice_statistics(Tensor stats, Tensor logits, Tensor targets, int64_t first_id, int64_t rows,
                            int32_t ignore_index);
void vocab_parallel_cross_entropy(Tensor losses, Tensor logits, Tensor all_stats, Tensor targets, int64_t first_id,
                                  int64_t rows, bool with_gradient, float loss_scale, int32_t ignore_index);
}  // namespace cuda

}  // namespace dt::kernels
