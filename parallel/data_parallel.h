// Data parallelism: every rank of the dp group runs forward and backward on its share of the
// global batch (data/data_loader.h), and the gradients are summed over the group before the
// update, so every rank applies the update one process would.
//
// ZeRO stage 0: the sum is taken in buckets, contiguous ranges of the flat gradient buffer of
// about parallel.bucket_mb cut at parameter boundaries, all-reduced in place; every rank keeps
// the whole AdamW state and updates every parameter (optim/adamw.h, outside this class).
//
// ZeRO stage 1 (Rajbhandari et al., 2020): the optimizer state is sharded. The parameter layout
// is cut into units (the embeddings, each block, the head; model/parameters.h), each padded so
// that it splits into equal parts over the ranks; rank r owns part r of every unit. Each unit's
// gradient is reduce-scattered into this rank's gradient shard, AdamW's moments exist only for
// the shard, the update runs on the owned parts of the parameters, and each unit's parameters
// are then all-gathered from the parts. The gradient norm is the shards' sums of squares summed
// over the group. Per rank the optimizer state is 8Ψ/N bytes instead of 8Ψ (f32 parameters and
// gradients stay whole: 4Ψ each).
//
// In both stages a bucket's (stage 0) or a unit's (stage 1) collective starts during the last
// micro-batch's backward as soon as the model reports its gradients final, while backward goes
// on with the layers below: communication overlaps with compute. Earlier micro-batches of an
// accumulation only accumulate locally; one reduction per step. Each rank's gradients are of
// the global-batch loss (scaled by the global target count, train/step.h), so the sum is the
// whole batch's gradient.
#pragma once

#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "kernels/flat_ranges.h"
#include "model/transformer.h"
#include "optim/adamw.h"

namespace dt {

class DataParallel {
 public:
  // Reduces `model`'s gradients over `dp` (whose device must be the model's). With zero_stage 1
  // the model's layout must have been made with unit_multiple(dp size), and `adamw` configures
  // the sharded optimizer.
  DataParallel(Transformer& model, Communicator& dp, double bucket_mb, int zero_stage = 0,
               const AdamWConfig& adamw = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The parameter layout's unit multiple ZeRO needs over `ranks` ranks: equal parts of whole
  // 16-element (64-byte) groups.
  static int64_t unit_multiple(int ranks) { return kParamAlignment * ranks; }

  Communicator& group() { return dp_; }
  int zero_stage() const { return zero_stage_; }
  // Stage 0's buckets, in launch order.
  const std::vector<kernels::FlatRange>& buckets() const { return buckets_; }

  // Arms the reduction for the next backward (the last micro-batch's): buckets or units launch
  // as the model reports their gradients final.
  void reduce_during_next_backward();
  // Waits until every bucket or unit of the armed backward is reduced over the group.
  void wait_for_gradients();

  // ZeRO stage 1 and above: the optimizer lives here.
  // The global gradient norm: the shards' sums of squares, summed over the group (one
  // all-reduce of a double). Not finite when any gradient is not.
  double global_grad_norm();
  // One AdamW update of this rank's parts with learning rate lr, every gradient multiplied by
  // grad_scale first, then each unit's parameters all-gathered from the parts.
  void update(float lr, float grad_scale);
  int64_t steps_taken() const { return steps_taken_; }
  // Checkpoints hold the whole AdamW state, whatever the stage and the number of ranks:
  // gather_moments fills `full` on rank 0 of the group from every rank's shard (a collective:
  // the other ranks pass nullptr and send their parts; nothing whole is allocated on them);
  // take_moments copies this rank's parts out of a whole state.
  void gather_moments(AdamW* full);
  void take_moments(AdamW& full);

 private:
  // Rank r's part of a unit: where it is in the flat buffers, and where in the shard.
  struct Part {
    kernels::FlatRange unit;
    kernels::FlatRange global;
    int64_t local = 0;
    std::vector<kernels::FlatRange> decayed, not_decayed;  // shown elements, relative to the part
  };
  void on_gradients_ready(int64_t ready_from);
  Tensor shard_view(const Buffer& b, const Part& p) const;

  Transformer& model_;
  Communicator& dp_;
  int zero_stage_;
  std::vector<kernels::FlatRange> buckets_;  // stage 0: from the end of the buffer to its start
  std::vector<Part> parts_;                  // stage 1: per unit, in layout order
  std::vector<kernels::FlatRange> shown_local_;  // stage 1: the shard's shown elements
  int64_t shard_elements_ = 0;
  Buffer grad_shard_, m_, v_;
  AdamWConfig adamw_;
  int64_t steps_taken_ = 0;
  std::vector<CollectiveHandle> in_flight_;
  size_t next_ = 0;  // the next bucket (stage 0) or unit from the end (stage 1) to launch
  bool armed_ = false;
};

}  // namespace dt
