#include "train/evaluate.h"

#include <algorithm>

#include "data/data_loader.h"

namespace dt {

Evaluation evaluate(Transformer& model, const TokenDataset& split, int batches, BatchBuffers& scratch,
                    pipeline::PipelineParallel* pipeline) {
  DataLoader loader(split, model.seq_len(), model.batch_size(), /*seed=*/0, /*shuffle=*/false);
  const int64_t available = std::max<int64_t>(1, loader.samples_per_epoch() / model.batch_size());
  const int64_t count = std::min<int64_t>(batches, available);
  double loss_sum = 0;
  int64_t targets_seen = 0;
  for (int64_t b = 0; b < count; ++b) {
    loader.next(scratch.host(0).tokens, scratch.host(0).targets);
    scratch.upload();
    const MicroBatch& batch = scratch.on_device()[0];
    loss_sum += pipeline != nullptr ? pipeline->forward({&batch, 1}) : model.forward(batch.tokens, batch.targets);
    targets_seen += Transformer::count_targets(scratch.host(0).targets);
  }
  return {loss_sum / static_cast<double>(targets_seen), targets_seen};
}

}  // namespace dt
