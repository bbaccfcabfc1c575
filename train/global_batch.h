// Synthetic training batches for comparing runs: the same tokens on every rank, so that a layout
// and one rank train on the same global batch without reading data (parallel/equivalence.h).
#pragma once

#include "core/buffer.h"
#include "parallel/context/context_parallel.h"
#include "train/batch_buffers.h"
#include "train/step.h"

namespace dt {

// `sequences` sequences of `seq_len` tokens and their targets for step `step`, a third of the
// targets ignored, unevenly, so that the global target count differs from any rank's.
struct GlobalBatch {
  Buffer tokens_memory, targets_memory;
  Tensor tokens, targets;
  GlobalBatch(int sequences, int seq_len, int vocab_size, int step);
  // Micro-batch `index` of `batch` sequences.
  MicroBatch micro_batch(int index, int batch) const;
};

// A data-parallel rank's share of `batch` into `into` (its count of micro-batches, each of its
// batch size): micro-batch m · dp + dp_rank for each m; under context parallelism this rank's
// tokens of each sequence, the padding token 0 with its target ignored. Then uploaded.
void take_rank_micro_batches(const GlobalBatch& batch, int dp, int dp_rank, const ContextParallel* context,
                             BatchBuffers& into);

}  // namespace dt
