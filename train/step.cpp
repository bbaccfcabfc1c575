#include "train/step.h"

#include "optim/grad_clip.h"

namespace dt {

StepStats accumulate_gradients(Transformer& model, std::span<const MicroBatch> micro_batches) {
  StepStats stats;
  for (const MicroBatch& mb : micro_batches) stats.targets += Transformer::count_targets(mb.targets);
  if (stats.targets == 0)
    throw Error(str("every target of this global batch of ", micro_batches.size(),
                    " micro-batches is the ignore index, so its loss is undefined; check the data's masking"));
  const float loss_scale = static_cast<float>(1.0 / static_cast<double>(stats.targets));
  model.grads().zero();
  double loss_sum = 0;
  for (const MicroBatch& mb : micro_batches) loss_sum += model.forward_backward(mb.tokens, mb.targets, loss_scale);
  stats.loss = loss_sum / static_cast<double>(stats.targets);
  return stats;
}

void apply_update(Transformer& model, AdamW& optimizer, float lr, float max_grad_norm, StepStats& stats) {
  stats.grad_norm = global_grad_norm(model.grads());
  stats.grad_scale = clip_coefficient(stats.grad_norm, max_grad_norm);
  optimizer.step(model.params(), model.grads(), lr, stats.grad_scale);
}

StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const MicroBatch> micro_batches, float lr,
                     float max_grad_norm) {
  StepStats stats = accumulate_gradients(model, micro_batches);
  apply_update(model, optimizer, lr, max_grad_norm, stats);
  return stats;
}

}  // namespace dt
