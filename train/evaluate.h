// Validation loss: the mean per-token loss over the first `batches` micro-batches of the
// validation split, read in order from its start, so that every evaluation of a run (and of
// `dtrain eval` afterwards) sees the same tokens and the numbers compare.
#pragma once

#include "core/tensor.h"
#include "data/token_dataset.h"
#include "model/transformer.h"

namespace dt {

struct Evaluation {
  double loss = 0;  // mean over the evaluated targets
  int64_t tokens = 0;
};

// Uses the model's micro-batch shape; evaluates min(batches, what the split holds) batches,
// at least one. tokens and targets are (B, T) i32 scratch.
Evaluation evaluate(Transformer& model, const TokenDataset& split, int batches, Tensor tokens, Tensor targets);

}  // namespace dt
