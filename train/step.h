// One optimizer step over a global batch split into micro-batches.
//
// The loss of a step is the sum of per-token losses over every target of the whole global
// batch that is not ignored, divided by the number of such targets. Each micro-batch's
// backward is therefore scaled by 1 / (targets in the global batch), counted before the
// first forward — not by 1 / (targets in the micro-batch) / (micro-batches), which weighs
// tokens unequally when ignored targets fall unevenly between micro-batches. So 2
// micro-batches of 4 sequences give the same update as 1 of 8.
//
// Then: global gradient norm, clipping coefficient, AdamW with the coefficient folded in.
#pragma once

#include <span>

#include "core/tensor.h"
#include "model/transformer.h"
#include "optim/adamw.h"

namespace dt {

struct MicroBatch {
  Tensor tokens;   // (B, T) i32
  Tensor targets;  // (B, T) i32, kernels::kIgnoreIndex where there is no target
};

struct StepStats {
  double loss = 0;       // mean over the counted targets
  double grad_norm = 0;  // before clipping
  float grad_scale = 1;  // clipping coefficient applied
  int64_t targets = 0;   // targets counted
};

// Zeroes the gradients, then runs forward and backward of every micro-batch, accumulating the
// gradient of the global-batch mean loss. Sets loss and targets.
StepStats accumulate_gradients(Transformer& model, std::span<const MicroBatch> micro_batches);
// Global norm, clipping coefficient and the AdamW update. Sets grad_norm and grad_scale.
void apply_update(Transformer& model, AdamW& optimizer, float lr, float max_grad_norm, StepStats& stats);
// Both: one training step.
StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const MicroBatch> micro_batches, float lr,
                     float max_grad_norm);

}  // namespace dt
