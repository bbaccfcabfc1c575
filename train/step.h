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
//
// With data parallelism (parallel/data_parallel.h) each rank passes its own micro-batches; the
// target count and the loss are summed over the ranks, and the gradients during the last
// micro-batch's backward (under ZeRO 2 and 3, during every micro-batch's), so every rank sees
// the global batch's loss and gradient.
//
// No update with a non-finite value is ever applied. When any gradient is inf or NaN the step
// is skipped, and StepStats names the first tensor (in backward order, i.e. the one the
// non-finite value reached first) that holds one. With a loss scaler (fp16 training,
// optim/loss_scaler.h) the loss is multiplied by its scale, the gradients are unscaled before
// clipping, and the scaler learns of every skipped step.
#pragma once

#include <span>
#include <string>

#include "core/tensor.h"
#include "model/expert_balance.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline/pipeline_parallel.h"

namespace dt {

struct StepStats {
  double loss = 0;        // mean over the counted targets
  double grad_norm = 0;   // before clipping, unscaled
  float grad_scale = 1;   // clipping coefficient applied
  float loss_scale = 1;   // the loss was multiplied by this in backward
  int64_t targets = 0;    // targets counted
  bool applied = true;    // false: a gradient was not finite and the update was skipped
  std::string nonfinite;  // when skipped: the first gradient tensor holding inf or NaN
  // Each expert block's loads and routers' losses over the step, summed over the ranks routing its
  // tokens (train_step only; model/expert_balance.h).
  std::vector<ExpertStats> expert_stats;
};

// Zeroes the gradients and the experts' load counts, then runs forward and backward of every
// micro-batch, accumulating the gradient of loss_scale times the global-batch mean loss. Sets
// loss, loss_scale and targets.
// With pipeline parallelism the micro-batches go through the pipeline's schedule (every pp rank
// passes the same ones), the tied embedding's gradient is summed between its holders, and the
// data-parallel reduction follows.
StepStats accumulate_gradients(Transformer& model, std::span<const MicroBatch> micro_batches, float loss_scale = 1,
                               DataParallel* data_parallel = nullptr, pipeline::PipelineParallel* pipeline = nullptr);
// Global norm, clipping coefficient and the AdamW update (optim/adamw.h), or a skipped step when
// a gradient is not finite. Sets grad_norm, grad_scale, applied and nonfinite. With a scaler,
// reports the outcome to it (which throws when the run has diverged); `step` is for its
// messages. With data parallelism the update is the DataParallel's: its optimizer's, then the
// weights shared over the group.
void apply_update(AdamW& optimizer, float lr, float max_grad_norm, StepStats& stats, LossScaler* scaler = nullptr,
                  int64_t step = 0, DataParallel* data_parallel = nullptr);
// Both: one training step, with the scaler's current scale; then the experts' loads summed and,
// where the model balances them by bias and the update was applied, the biases moved
// (model/expert_balance.h).
StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const MicroBatch> micro_batches, float lr,
                     float max_grad_norm, LossScaler* scaler = nullptr, int64_t step = 0,
                     DataParallel* data_parallel = nullptr, pipeline::PipelineParallel* pipeline = nullptr);
// One training step with data parallelism, at any ZeRO stage: its optimizer's update.
StepStats train_step(Transformer& model, DataParallel& data_parallel, std::span<const MicroBatch> micro_batches,
                     float lr, float max_grad_norm, LossScaler* scaler = nullptr, int64_t step = 0,
                     pipeline::PipelineParallel* pipeline = nullptr);

}  // namespace dt
