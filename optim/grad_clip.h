// Global-norm gradient clipping.
//
// The global norm is sqrt(sum over parameters of sum of squares of the gradient), with every
// parameter counted once: the tied input/output embedding is one tensor, so once. Padding
// rows are excluded (their gradient is zero anyway). Clipping, as torch.nn.utils.clip_grad_norm_:
//   coefficient = max_norm / (norm + 1e-6), applied only when it is below 1.
// The coefficient is folded into the optimizer's grad_scale instead of rewriting gradients.
// One pass over the flat gradient buffer (one launch and one read-back on the GPU).
#pragma once

#include "model/parameters.h"

namespace dt {

double global_grad_norm(const FlatTensors& grads);
// 1 when max_norm <= 0 (clipping disabled) or the norm is within it.
float clip_coefficient(double norm, float max_norm);

}  // namespace dt
