#include "train/step.h"

#include <cmath>

#include "core/trace.h"
#include "model/float8_linear.h"
#include "kernels/reduce.h"
#include "optim/grad_clip.h"

namespace dt {

StepStats accumulate_gradients(Transformer& model, std::span<const MicroBatch> micro_batches, float loss_scale,
                               DataParallel* data_parallel, pipeline::PipelineParallel* pipeline) {
  StepStats stats;
  stats.loss_scale = loss_scale;
  for (const MicroBatch& mb : micro_batches) stats.targets += Transformer::count_targets(mb.targets);
  // Counts far below 2^53 are exact in double.
  if (data_parallel != nullptr)
    stats.targets = static_cast<int64_t>(
        all_reduce_value(data_parallel->group(), static_cast<double>(stats.targets), ReduceOp::sum));
  if (stats.targets == 0)
    throw Error(str("every target of this global batch of ", micro_batches.size(),
                    " micro-batches is the ignore index, so its loss is undefined; check the data's masking"));
  const float token_scale = static_cast<float>(loss_scale / static_cast<double>(stats.targets));
  model.grads().zero();
  for (Stage* stage : model.stages())
    if (stage != nullptr) stage->reset_expert_records();
  double loss_sum = 0;
  if (pipeline != nullptr) {
    // Each of the schedule's actions is a span of its own (pipeline/executor.h).
    loss_sum = pipeline->forward_backward(micro_batches, token_scale);
    pipeline->sum_tied_gradients();
    if (data_parallel != nullptr) data_parallel->reduce_gradients();
  }
  for (size_t m = 0; pipeline == nullptr && m < micro_batches.size(); ++m) {
    const bool reduce = data_parallel != nullptr &&
                        (m + 1 == micro_batches.size() || data_parallel->policy().reduces_every_micro_batch());
    if (reduce) data_parallel->reduce_during_next_backward(/*first_of_step=*/m == 0);
    {
      const trace::ComputeScope span(str("forward and backward ", m + 1, "/", micro_batches.size()));
      loss_sum += model.forward_backward(micro_batches[m].tokens, micro_batches[m].targets, token_scale);
    }
    if (reduce) data_parallel->wait_for_gradients();
  }
  if (data_parallel != nullptr) loss_sum = all_reduce_value(data_parallel->group(), loss_sum, ReduceOp::sum);
  stats.loss = loss_sum / static_cast<double>(stats.targets);
  return stats;
}

void apply_update(AdamW& optimizer, float lr, float max_grad_norm, StepStats& stats, LossScaler* scaler, int64_t step,
                  DataParallel* data_parallel) {
  const trace::ComputeScope span("gradient norm and optimizer");
  const double scaled_norm = optimizer.global_grad_norm();
  // A sum of squares in double overflows only if an element is inf or NaN.
  stats.applied = std::isfinite(scaled_norm);
  if (!stats.applied) stats.nonfinite = optimizer.first_nonfinite_gradient();
  if (scaler != nullptr) scaler->update(stats.applied, step);
  if (!stats.applied) return;
  // Unscale before clipping, so that clipping sees the true norm.
  stats.grad_norm = scaled_norm / stats.loss_scale;
  stats.grad_scale = clip_coefficient(stats.grad_norm, max_grad_norm);
  const float grad_scale = stats.grad_scale / stats.loss_scale;
  if (data_parallel != nullptr)
    data_parallel->update(lr, grad_scale);
  else
    optimizer.step(lr, grad_scale);
}

StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const MicroBatch> micro_batches, float lr,
                     float max_grad_norm, LossScaler* scaler, int64_t step, DataParallel* data_parallel,
                     pipeline::PipelineParallel* pipeline) {
  DT_CHECK(data_parallel == nullptr || &data_parallel->optimizer() == &optimizer,
           "with data parallelism the optimizer is the DataParallel's");
  StepStats stats = accumulate_gradients(model, micro_batches, scaler != nullptr ? scaler->scale() : 1.0f,
                                         data_parallel, pipeline);
  apply_update(optimizer, lr, max_grad_norm, stats, scaler, step, data_parallel);
  stats.expert_stats = end_step_expert_balance(model, data_parallel != nullptr ? &data_parallel->group() : nullptr,
                                               stats.applied, stats.targets);
  end_step_float8(model, {model.regions().group(), data_parallel != nullptr ? &data_parallel->group() : nullptr});
  return stats;
}

StepStats train_step(Transformer& model, DataParallel& data_parallel, std::span<const MicroBatch> micro_batches,
                     float lr, float max_grad_norm, LossScaler* scaler, int64_t step,
                     pipeline::PipelineParallel* pipeline) {
  return train_step(model, data_parallel.optimizer(), micro_batches, lr, max_grad_norm, scaler, step, &data_parallel,
                    pipeline);
}

}  // namespace dt
