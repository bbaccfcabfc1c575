// Validation loss: the mean per-token loss over the first `batches` micro-batches of the
// validation split, read in order from its start, so that every evaluation of a run (and of
// `dtrain eval` afterwards) sees the same tokens and the numbers compare.
#pragma once

#include "data/token_dataset.h"
#include "model/transformer.h"
#include "parallel/context/context_parallel.h"
#include "parallel/pipeline/pipeline_parallel.h"
#include "train/batch_buffers.h"

namespace dt {

struct Evaluation {
  double loss = 0;  // mean over the evaluated targets
  int64_t tokens = 0;
};

// Uses the model's micro-batch shape; evaluates min(batches, what the split holds) batches,
// at least one. scratch: one micro-batch of the model's shape on its device. A pipeline rank's
// model runs its stages' forwards through `pipeline` (every rank of its group evaluates); a
// context-parallel rank's reads whole sequences and runs its tokens of them, the loss summed
// over the cp group (every rank of it evaluates).
Evaluation evaluate(Transformer& model, const TokenDataset& split, int batches, BatchBuffers& scratch,
                    pipeline::PipelineParallel* pipeline = nullptr, const ContextParallel* context = nullptr);

}  // namespace dt
