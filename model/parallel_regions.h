// Where tensor and sequence parallelism communicate inside the model. Megatron's
// column-parallel linear layer (attention's qkv, the MLP's fc, the output projection) takes its
// input through f — identity forward, the sum of the input's gradient over the group backward —
// and the row-parallel one (each branch's output projection, and the vocabulary-parallel
// embedding) gives its output through g — the sum over the group forward, identity backward.
// Key/value heads that several ranks hold copies of (model/tensor_shard.h) have their gradients
// summed over those ranks, and the loss is computed from each rank's slice of the vocabulary.
//
// With sequence parallelism each rank holds a part of the micro-batch's rows (its tokens) in
// the regions between the linear layers — the norms and the residual stream — and f becomes an
// all-gather of the parts into the whole rows, g a reduce-scatter of the partial sums into this
// rank's part: the same bytes as the all-reduces they replace. The norms' weight gradients are
// then partial (each rank's rows) and are summed over the group.
//
// Blocks and stages pass every linear layer's input and output, the norms' gradients and the
// logits through this object. Each call takes the tensor it works on and, where sequence
// parallelism puts the result elsewhere, the buffer for it: `whole` (all N rows) or `local`
// (rows(N) of them); without sequence parallelism that buffer is not used. On one rank
// (single_rank()) every call returns its argument and communicates nothing;
// parallel/tensor/tensor_parallel.h overrides them with the group's collectives, so that tensor
// parallelism is a variant of this object, not a branch in the model.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/flat_ranges.h"
#include "model/tensor_shard.h"

namespace dt {

// A sum in flight: `value` holds it once `done` has been waited for.
struct PendingSum {
  Tensor value;
  CollectiveHandle done;
};

class ParallelRegions {
 public:
  virtual ~ParallelRegions() = default;
  // One rank's: stateless, shared.
  static ParallelRegions& single_rank();

  // The part of the model this rank holds.
  virtual TensorShard shard() const { return {}; }
  // The tensor-parallel group, or none on one rank: the gradient norm is completed over it.
  virtual Communicator* group() const { return nullptr; }
  // Whether the norms and the residual stream hold a part of the rows (sequence parallelism).
  virtual bool sequence_parallel() const { return false; }
  // The rows of a micro-batch of N rows this rank holds there: [begin, end) of N.
  virtual kernels::FlatRange rows(int64_t n) const { return {0, n}; }

  // f, forward: the input a column-parallel layer reads, from this rank's rows x.
  virtual Tensor column_input(Tensor x, Tensor /*whole*/) { return x; }
  // f, backward: starts summing the layer's input gradient dx (all rows) over the group, into
  // this rank's rows. Work that does not need the sum (the layer's weight gradient) goes before
  // the wait.
  virtual PendingSum column_input_gradient(Tensor dx, Tensor /*local*/) { return {dx, {}}; }
  // g, forward: this rank's rows of the complete output, from the layer's partial output y.
  virtual Tensor row_output(Tensor y, Tensor /*local*/) { return y; }
  // g, backward: the gradient the row-parallel layer reads for its whole output, from this
  // rank's rows dy.
  virtual Tensor row_output_gradient(Tensor dy, Tensor /*whole*/) { return dy; }
  // Gradients computed from this rank's rows only, summed over the group in place (the norms'
  // with sequence parallelism).
  virtual void sum_partial_gradients(Tensor /*grads*/) {}
  // The gradients of the key/value heads this rank holds copies of, in dqkv (N, this rank's qkv
  // width), summed over the ranks holding them: after the input's gradient has used this rank's
  // own, before the weight's gradient reads them.
  virtual void sum_copied_head_gradients(Tensor /*dqkv*/) {}
  // The elementwise maximum of `values` (f32, on the host) over the group, in place: the largest
  // magnitude of each row of a row-parallel layer's weight or input, whose slices the ranks
  // hold, for quantization-aware training's int8 per-row scale.
  virtual void max_over_group(Tensor /*values*/) {}
  // The per-token losses (N) of this rank's logits (N, stored rows), the vocabulary's ids `vocab`
  // (kernels/cross_entropy.h); with the gradient, loss_scale times the losses' sum's gradient
  // written over the logits.
  virtual void cross_entropy(Tensor losses, Tensor logits, Tensor targets, kernels::FlatRange vocab,
                             bool with_gradient, float loss_scale);
};

}  // namespace dt
