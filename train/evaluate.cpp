#include "train/evaluate.h"

#include <algorithm>
#include <optional>

#include "data/data_loader.h"
#include "kernels/cross_entropy.h"
#include "model/float8_linear.h"

namespace dt {

Evaluation evaluate(Transformer& model, const TokenDataset& split, int batches, BatchBuffers& scratch,
                    pipeline::PipelineParallel* pipeline, const ContextParallel* context) {
  const int T = context != nullptr ? context->seq_len() : model.seq_len(), B = model.batch_size();
  DataLoader loader(split, T, B, /*seed=*/0, /*shuffle=*/false);
  const int64_t available = std::max<int64_t>(1, loader.samples_per_epoch() / B);
  const int64_t count = std::min<int64_t>(batches, available);
  // Under context parallelism the loader's whole sequences, of which this rank takes its tokens.
  std::optional<BatchBuffers> whole;
  if (context != nullptr) whole.emplace(1, B, T, Device::cpu);
  double loss_sum = 0;
  int64_t targets_seen = 0;
  const Float8AmaxesKept training_amaxes(model.linear_states());
  for (int64_t b = 0; b < count; ++b) {
    const MicroBatch& read = whole ? whole->host(0) : scratch.host(0);
    loader.next(read.tokens, read.targets);
    if (context != nullptr) {
      context->take_own(read.tokens, scratch.host(0).tokens, 0);
      context->take_own(read.targets, scratch.host(0).targets, kernels::kIgnoreIndex);
    }
    scratch.upload();
    const MicroBatch& batch = scratch.on_device()[0];
    loss_sum += pipeline != nullptr ? pipeline->forward({&batch, 1}) : model.forward(batch.tokens, batch.targets);
    targets_seen += Transformer::count_targets(scratch.host(0).targets);
  }
  if (context != nullptr) {  // each cp rank saw its tokens' losses and targets
    loss_sum = all_reduce_value(context->group(), loss_sum, ReduceOp::sum);
    targets_seen = static_cast<int64_t>(
        all_reduce_value(context->group(), static_cast<double>(targets_seen), ReduceOp::sum));
  }
  return {loss_sum / static_cast<double>(targets_seen), targets_seen};
}

}  // namespace dt
