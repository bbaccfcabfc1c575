// Where tensor and sequence parallelism communicate inside a block. Megatron's column-parallel
// linear layer (attention's qkv, the MLP's fc) takes its input through f — identity forward,
// all-reduce of the input's gradient backward — and the row-parallel one (each branch's output
// projection) gives its output through g — all-reduce forward, identity backward. With sequence
// parallelism f becomes an all-gather along the sequence and g a reduce-scatter.
//
// A block passes every linear layer's input and output through these four calls. On one rank
// each returns its argument and communicates nothing: they are the places where the
// tensor-parallel group's collectives go, so that tensor parallelism is a variant of this
// object, not a branch in the block.
#pragma once

#include "core/tensor.h"

namespace dt {

class ParallelRegions {
 public:
  // f, forward: the input a column-parallel layer reads (the whole sequence, with sp).
  Tensor column_input(Tensor x) const { return x; }
  // f, backward: the complete gradient of the block's own input from the layer's input
  // gradient dx (summed over the group; reduce-scattered along the sequence with sp).
  Tensor column_input_gradient(Tensor dx) const { return dx; }
  // g, forward: the complete output from the layer's partial output y (summed over the group;
  // reduce-scattered along the sequence with sp).
  Tensor row_output(Tensor y) const { return y; }
  // g, backward: the gradient the row-parallel layer reads for its output.
  Tensor row_output_gradient(Tensor dy) const { return dy; }
};

}  // namespace dt
