// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_:
//   coefficient = max_norm / (norm + 1e-6), applied only when it is below 1,
// where the norm is AdamW::global_grad_norm (optim/adamw.h: every parameter counted once,
// padding excluded). The coefficient is folded into the optimizer's grad_scale instead of
// rewriting gradients.
#pragma once

namespace dt {

// 1 when max_norm <= 0 (clipping disabled) or the norm is within it.
float clip_coefficient(double norm, float max_norm);

}  // namespace dt
