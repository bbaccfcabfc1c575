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
// from 1. Weight decay is the caller's choice (matrices yes, biases and norms no): optim/
// adamw.h makes one call for the ranges it decays and one for the rest.
//
// The multi-tensor form updates elements [begin, end) of each range of flat buffers (1-D, equal
// lengths; kernels/flat_ranges.h) and leaves every other element alone: one launch on the GPU
// for the whole model. The one-tensor form is the one-range case.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "kernels/flat_ranges.h"

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
void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, std::span<const FlatRange> ranges,
                  const AdamWStep& s);

namespace cpu {
void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, std::span<const FlatRange> ranges,
                  const AdamWStep& s);
}  // namespace cpu

namespace cuda {
void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, std::span<const FlatRange> ranges,
                  const AdamWStep& s);
}  // namespace cuda

}  // namespace dt::kernels
