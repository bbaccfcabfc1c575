// AdamW (Loshchilov & Hutter), elementwise over flat buffers, in the order PyTorch's
// torch.optim.AdamW (foreach=False) computes it, so fp32 results agree to rounding:
//
//   g     = grad * grad_scale                       (grad_scale folds in clipping / loss-scale)
//   param = param * (1 - lr * weight_decay)
//   m     = beta1 * m + (1 - beta1) * g
//   v     = beta2 * v + (1 - beta2) * g * g
//   param = param - (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//
// Updates param, m and v in place (all f32, shapes equal); grad is read only. step counts
// from 1. Weight decay per range is the caller's choice (matrices yes, biases and norms no).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dt::kernels {

struct AdamWStep {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0;
  int64_t step = 1;
  float grad_scale = 1;
};

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s);

namespace cpu {
void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s);
}  // namespace cpu

namespace cuda {
void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s);
}  // namespace cuda

}  // namespace dt::kernels
