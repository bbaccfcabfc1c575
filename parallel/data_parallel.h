// Data parallelism: every rank of the dp group holds the whole model, runs forward and backward
// on its share of the global batch (data/data_loader.h), and the gradients are summed over the
// group before the update, so every rank applies the update one process would.
//
// The sum is taken in buckets: contiguous ranges of the flat gradient buffer of about
// parallel.bucket_mb, cut at parameter boundaries, in the order backward finishes them (from the
// end of the layout; model/transformer.h). During the last micro-batch's backward the model
// reports how far its gradients are final, and each bucket's all-reduce starts as soon as the
// whole bucket is, while backward goes on with the layers below: communication overlaps with
// compute. Earlier micro-batches of an accumulation only accumulate locally; one reduction per
// step. Each rank's gradients are of the global-batch loss (scaled by the global target count,
// train/step.h), so the sum is the whole batch's gradient.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "kernels/flat_ranges.h"
#include "model/transformer.h"

namespace dt {

class DataParallel {
 public:
  // Buckets for `model`'s layout; reduces over `dp` (whose device must be the model's).
  DataParallel(Transformer& model, Communicator& dp, double bucket_mb);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  Communicator& group() { return dp_; }
  const std::vector<kernels::FlatRange>& buckets() const { return buckets_; }  // in launch order

  // Arms the reduction for the next backward (the last micro-batch's): buckets launch as the
  // model reports their gradients final.
  void reduce_during_next_backward();
  // Waits until every bucket of the armed backward is summed over the group.
  void wait_for_gradients();

 private:
  void on_gradients_ready(int64_t ready_from);

  Transformer& model_;
  Communicator& dp_;
  std::vector<kernels::FlatRange> buckets_;  // from the end of the buffer to its start
  std::vector<CollectiveHandle> in_flight_;
  size_t next_bucket_ = 0;
  bool armed_ = false;
};

}  // namespace dt
