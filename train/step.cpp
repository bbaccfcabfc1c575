#include "train/step.h"

#include <cmath>

#include "core/trace.h"
#include "kernels/reduce.h"
#include "optim/grad_clip.h"

namespace dt {

StepStats accumulate_gradients(Transformer& model, std::span<const MicroBatch> micro_batches, float loss_scale,
                               DataParallel* dp) {
  StepStats stats;
  stats.loss_scale = loss_scale;
  for (const MicroBatch& mb : micro_batches) stats.targets += Transformer::count_targets(mb.targets);
  // Counts far below 2^53 are exact in double.
  if (dp != nullptr)
    stats.targets = static_cast<int64_t>(all_reduce_value(dp->group(), static_cast<double>(stats.targets), ReduceOp::sum));
  if (stats.targets == 0)
    throw Error(str("every target of this global batch of ", micro_batches.size(),
                    " micro-batches is the ignore index, so its loss is undefined; check the data's masking"));
  const float token_scale = static_cast<float>(loss_scale / static_cast<double>(stats.targets));
  model.grads().zero();
  double loss_sum = 0;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const bool reduce = dp != nullptr && (m + 1 == micro_batches.size() || dp->reduces_every_micro_batch());
    if (reduce) dp->reduce_during_next_backward(/*first_of_step=*/m == 0);
    {
      const trace::ComputeScope span(str("forward and backward ", m + 1, "/", micro_batches.size()));
      loss_sum += model.forward_backward(micro_batches[m].tokens, micro_batches[m].targets, token_scale);
    }
    if (reduce) dp->wait_for_gradients();
  }
  if (dp != nullptr) loss_sum = all_reduce_value(dp->group(), loss_sum, ReduceOp::sum);
  stats.loss = loss_sum / static_cast<double>(stats.targets);
  return stats;
}

namespace {

// The first gradient holding inf or NaN, in the order backward computes them (the reverse of
// the parameter order).
std::string first_nonfinite_gradient(const FlatTensors& grads) {
  const auto& params = grads.layout().params();
  for (auto p = params.rbegin(); p != params.rend(); ++p)
    if (!kernels::all_finite(grads.shown(*p))) return p->name;
  return "";
}

}  // namespace

namespace {

// After the norm: the skip decision (naming the first non-finite gradient), the scaler, the
// clipping coefficient, and `update` with the gradient scale to apply.
template <typename FirstNonfinite, typename Update>
void update_with(double scaled_norm, FirstNonfinite&& first_nonfinite, float max_grad_norm, StepStats& stats,
                 LossScaler* scaler, int64_t step, Update&& update) {
  // A sum of squares in double overflows only if an element is inf or NaN.
  stats.applied = std::isfinite(scaled_norm);
  if (!stats.applied) stats.nonfinite = first_nonfinite();
  if (scaler != nullptr) scaler->update(stats.applied, step);
  if (!stats.applied) return;
  // Unscale before clipping, so that clipping sees the true norm.
  stats.grad_norm = scaled_norm / stats.loss_scale;
  stats.grad_scale = clip_coefficient(stats.grad_norm, max_grad_norm);
  update(stats.grad_scale / stats.loss_scale);
}

}  // namespace

void apply_update(Transformer& model, AdamW& optimizer, float lr, float max_grad_norm, StepStats& stats,
                  LossScaler* scaler, int64_t step) {
  const trace::ComputeScope span("gradient norm and optimizer");
  update_with(
      global_grad_norm(model.grads()), [&] { return first_nonfinite_gradient(model.grads()); }, max_grad_norm, stats,
      scaler, step, [&](float grad_scale) { optimizer.step(model.params(), model.grads(), lr, grad_scale); });
}

void apply_sharded_update(DataParallel& zero, float lr, float max_grad_norm, StepStats& stats, LossScaler* scaler,
                          int64_t step) {
  const trace::ComputeScope span("gradient norm and optimizer (sharded)");
  update_with(
      zero.global_grad_norm(), [&] { return zero.first_nonfinite_gradient(); }, max_grad_norm, stats, scaler, step,
      [&](float grad_scale) { zero.update(lr, grad_scale); });
}

StepStats train_step(Transformer& model, AdamW& optimizer, std::span<const MicroBatch> micro_batches, float lr,
                     float max_grad_norm, LossScaler* scaler, int64_t step, DataParallel* dp) {
  DT_CHECK(dp == nullptr || dp->zero_stage() == 0, "with ZeRO the optimizer is the DataParallel's: use its train_step");
  StepStats stats = accumulate_gradients(model, micro_batches, scaler != nullptr ? scaler->scale() : 1.0f, dp);
  apply_update(model, optimizer, lr, max_grad_norm, stats, scaler, step);
  return stats;
}

StepStats train_step(Transformer& model, DataParallel& zero, std::span<const MicroBatch> micro_batches, float lr,
                     float max_grad_norm, LossScaler* scaler, int64_t step) {
  StepStats stats = accumulate_gradients(model, micro_batches, scaler != nullptr ? scaler->scale() : 1.0f, &zero);
  apply_sharded_update(zero, lr, max_grad_norm, stats, scaler, step);
  return stats;
}

}  // namespace dt
