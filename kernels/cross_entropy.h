// Fused log-softmax and cross-entropy over the vocabulary, with an ignore index.
//
// logits (N, Vp): only the first V columns are real; columns [V, Vp) are padding and are never
// read. targets (N) i32, each in [0, V) or equal to ignore_index.
//
//   losses[n] = logsumexp(logits[n, :V]) - logits[n, targets[n]]      (0 where ignored)
//
// cross_entropy_forward_backward also overwrites the logits, in place, with the gradient of
// loss_scale * sum_n losses[n]:
//   dlogits[n, v] = loss_scale * (softmax(logits[n, :V])[v] - [v == targets[n]])  for v < V
//   dlogits[n, v] = 0  for padding columns and for ignored rows
// so no second (N, Vp) buffer exists. Both set losses (N).
// Dtypes: logits f32, f64, bf16 or f16; losses f32 (f64 with f64). 16-bit logits are widened
// exactly, the row's softmax and loss are computed in f32, and the gradient is rounded once
// when written over them.
// Each row takes three streaming passes over V: the maximum; exp(x - max) and its sum (written
// in place when the gradient is wanted, so it is not recomputed); the scaling by 1 / sum.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dt::kernels {

constexpr int32_t kIgnoreIndex = -100;  // PyTorch's default ignore_index

void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size,
                           int32_t ignore_index = kIgnoreIndex);
void cross_entropy_forward_backward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size,
                                    float loss_scale, int32_t ignore_index = kIgnoreIndex);

namespace cpu {
void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size, int32_t ignore_index);
void cross_entropy_forward_backward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size,
                                    float loss_scale, int32_t ignore_index);
}  // namespace cpu

namespace cuda {
void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size, int32_t ignore_index);
void cross_entropy_forward_backward(Tensor losses, Tensor logits, Tensor targets, int64_t vocab_size,
                                    float loss_scale, int32_t ignore_index);
}  // namespace cuda

}  // namespace dt::kernels
