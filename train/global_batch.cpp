#include "train/global_batch.h"

#include <cstring>

#include "core/rng.h"
#include "kernels/cross_entropy.h"

namespace dt {

GlobalBatch::GlobalBatch(int sequences, int seq_len, int vocab_size, int step)
    : tokens_memory(static_cast<size_t>(sequences) * seq_len * sizeof(int32_t), MemTag::workspace),
      targets_memory(static_cast<size_t>(sequences) * seq_len * sizeof(int32_t), MemTag::workspace),
      tokens(tokens_memory.view(DType::i32, {sequences, seq_len})),
      targets(targets_memory.view(DType::i32, {sequences, seq_len})) {
  // The stream's name is the one the equivalence bounds were measured with.
  const ElementRng rng(static_cast<uint64_t>(step), "data_parallel_test");
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    const double ignore_share = (i / seq_len) % 3 == 0 ? 0.7 : 0.1;
    tokens.ptr<int32_t>()[i] = static_cast<int32_t>(rng.uniform(3 * i) * vocab_size);
    targets.ptr<int32_t>()[i] = rng.uniform(3 * i + 1) < ignore_share
                                    ? kernels::kIgnoreIndex
                                    : static_cast<int32_t>(rng.uniform(3 * i + 2) * vocab_size);
  }
}

MicroBatch GlobalBatch::micro_batch(int index, int batch) const {
  return {tokens.slice_rows(int64_t{index} * batch, batch), targets.slice_rows(int64_t{index} * batch, batch)};
}

void take_rank_micro_batches(const GlobalBatch& batch, int dp, int dp_rank, const ContextParallel* context,
                             BatchBuffers& into) {
  for (int m = 0; m < into.count(); ++m) {
    const MicroBatch& own = into.host(m);
    const MicroBatch whole = batch.micro_batch(m * dp + dp_rank, static_cast<int>(own.tokens.dim(0)));
    const auto take = [&](const Tensor& from, const Tensor& to, int32_t fill) {
      if (context != nullptr)
        context->take_own(from, to, fill);
      else
        std::memcpy(to.data, from.data, to.bytes());
    };
    take(whole.tokens, own.tokens, 0);
    take(whole.targets, own.targets, kernels::kIgnoreIndex);
  }
  into.upload();
}

}  // namespace dt
