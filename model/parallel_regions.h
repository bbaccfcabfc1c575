// Where tensor parallelism communicates inside the model. Megatron's column-parallel linear
// layer (attention's qkv, the MLP's fc, the output projection) takes its input through f —
// identity forward, the sum of the input's gradient over the group backward — and the
// row-parallel one (each branch's output projection, and the vocabulary-parallel embedding)
// gives its output through g — the sum over the group forward, identity backward. Key/value heads
// that several ranks hold copies of (model/tensor_shard.h) have their gradients summed over
// those ranks, and the loss is computed from each rank's slice of the vocabulary.
//
// Blocks and stages pass every linear layer's input and output, and the logits, through this
// object. On one rank (single_rank()) every call returns its argument and communicates nothing;
// parallel/tensor/tensor_parallel.h overrides them with the tensor-parallel group's collectives,
// so that tensor parallelism is a variant of this object, not a branch in the model.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/flat_ranges.h"
#include "model/tensor_shard.h"

namespace dt {

class ParallelRegions {
 public:
  virtual ~ParallelRegions() = default;
  // One rank's: stateless, shared.
  static ParallelRegions& single_rank();

  // The part of the model this rank holds.
  virtual TensorShard shard() const { return {}; }
  // The tensor-parallel group, or none on one rank: the gradient norm is completed over it.
  virtual Communicator* group() const { return nullptr; }
  // f, forward: the input a column-parallel layer reads.
  virtual Tensor column_input(Tensor x) { return x; }
  // f, backward: starts summing the layer's input gradient dx over the group, in place; read dx
  // after the handle's wait(). Work that does not need it (the layer's weight gradient) goes
  // between.
  virtual CollectiveHandle column_input_gradient(Tensor /*dx*/) { return {}; }
  // g, forward: the complete output from the layer's partial output y, summed in place.
  virtual Tensor row_output(Tensor y) { return y; }
  // g, backward: the gradient the row-parallel layer reads for its output.
  virtual Tensor row_output_gradient(Tensor dy) { return dy; }
  // The gradients of the key/value heads this rank holds copies of, in dqkv (N, this rank's qkv
  // width), summed over the ranks holding them: after the input's gradient has used this rank's
  // own, before the weight's gradient reads them.
  virtual void sum_copied_head_gradients(Tensor /*dqkv*/) {}
  // The per-token losses (N) of this rank's logits (N, stored rows), the vocabulary's ids `vocab`
  // (kernels/cross_entropy.h); with the gradient, loss_scale times the losses' sum's gradient
  // written over the logits.
  virtual void cross_entropy(Tensor losses, Tensor logits, Tensor targets, kernels::FlatRange vocab,
                             bool with_gradient, float loss_scale);
};

}  // namespace dt
