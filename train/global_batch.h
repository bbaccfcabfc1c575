// What the parallel equivalence tests (parallel/data_parallel_test.cpp,
// parallel/tensor/tensor_parallel_test.cpp) train on and how they compare runs.
#pragma once

#include <vector>

#include "core/buffer.h"
#include "train/step.h"

namespace dt::testing {

// `sequences` sequences of `seq_len` tokens and their targets for step `step`, a third of the
// targets ignored, unevenly, so that the global target count differs from any rank's.
struct GlobalBatch {
  Buffer tokens_memory, targets_memory;
  Tensor tokens, targets;
  GlobalBatch(int sequences, int seq_len, int vocab_size, int step);
  // Micro-batch `index` of `batch` sequences.
  MicroBatch micro_batch(int index, int batch) const;
};

// The largest of |a[i] - b[i]| / |b[i]|.
double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace dt::testing
