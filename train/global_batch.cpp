#include "tests/training_batches.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "kernels/cross_entropy.h"

namespace dt::testing {

GlobalBatch::GlobalBatch(int sequences, int seq_len, int vocab_size, int step)
    : tokens_memory(static_cast<size_t>(sequences) * seq_len * sizeof(int32_t), MemTag::workspace),
      targets_memory(static_cast<size_t>(sequences) * seq_len * sizeof(int32_t), MemTag::workspace),
      tokens(tokens_memory.view(DType::i32, {sequences, seq_len})),
      targets(targets_memory.view(DType::i32, {sequences, seq_len})) {
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

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return worst;
}

}  // namespace dt::testing
