// One transformer block, the one forward that training and generation both run, and its
// backward split into the input's gradient and the weights' gradients:
//
//   x' = x + attn.proj(attention(attn.qkv(ln_1(x))))
//   y  = x' + mlp.proj(act(mlp.fc(ln_2(x'))))
//
// as model/block_declaration.h declares it: the norm, the MLP's activation and the biases are the
// family's traits; attention (with rotary embedding where the family has it) is an
// AttentionCore (model/attention_core.h), and every linear layer's input and output pass
// through the block's ParallelRegions (model/parallel_regions.h).
// Under tensor parallelism the block holds this rank's heads and MLP columns (model/tensor_shard.h):
// qkv, atty, lse, fch and fch_act are this rank's widths; the rest are the model's. With sequence
// parallelism the block's input and output, the norms' activations and the residual stream are
// this rank's rows of the micro-batch (regions.rows(N)); the linear layers and attention work on
// all N rows.
// The block holds its layers (model/layers.h), resolved once from the layout, and its
// recomputation policy; it owns no memory: activations and gradients are views its caller
// passes (model/activation_store.h for training, the session's buffers for generation).
// Weights are read from `weights` (the buffer forward reads, in the activations' dtype);
// gradients are added into `grads` (f32).
#pragma once

#include "core/tensor.h"
#include "model/attention_core.h"
#include "model/layers.h"
#include "model/parallel_regions.h"
#include "model/parameters.h"
#include "model/recompute.h"

namespace dt {

// One block's activations for N rows, (N, width) views, or (this rank's rows, width) for ln1, ln2,
// res2, res3, their statistics and branch. The *_mean views are gpt2's only, lse is training's
// only. res2 and res3 may be the block's input x itself (generation updates the residual stream
// in place; kernels/add.h allows it); the others must be distinct. proj_out is scratch for both
// branches' output projections (all rows), branch for their sum (this rank's rows) and gathered
// for a column-parallel layer's whole input: the last two are used with sequence parallelism
// only.
struct BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, lse, proj_out, res2, ln2, ln2_mean, ln2_rstd, fch, fch_act, res3;
  Tensor branch, gathered;
};

// One block's gradients for N rows in backward. dout is the output's gradient (given); dres2 the
// gradient of x' and din the input's (set): this rank's rows with sequence parallelism, like
// dpart, where a column-parallel layer's summed input gradient goes (used with sequence
// parallelism only). dtmp, datty, dact, dfch and dqkv are working space for all rows; datty
// (N, this rank's attention width) may share dtmp's memory.
// When the weights' gradients are taken at once (backward_input with weights_now), dres2 and din
// may be dout itself: the residual stream's gradient is then updated in place. When they are
// deferred to backward_weight, dout, dres2, dfch and dqkv are what it reads: they must be
// distinct and kept, with the activations, until then.
struct BlockGradients {
  Tensor dout, dres2, din, dtmp, datty, dact, dfch, dqkv, dpart;
};

class Block {
 public:
  // The block's communication goes through `regions` (which must outlive it).
  Block(const ParameterLayout& layout, int layer, Recompute recompute,
        ParallelRegions& regions = ParallelRegions::single_rank());

  int layer() const { return layer_; }
  // The block's unit of the layout (model/parameters.h).
  size_t unit() const { return unit_; }
  Recompute recompute() const { return recompute_; }

  // From the input x (N, C): sets every activation in `a`, the output in a.res3.
  void forward(const FlatTensors& weights, Tensor x, const BlockActivations& a, AttentionCore& attention) const;
  // From d.dout: sets d.din, the input's gradient, and adds the norms' parameter gradients into
  // grads; the linear layers' weight gradients too when weights_now, else backward_weight adds
  // them later. Reads the activations forward kept, rerunning what the recomputation policy
  // dropped: the whole block up to the MLP's activation (full), or the attention core
  // (selective).
  void backward_input(const FlatTensors& weights, const FlatTensors& grads, Tensor x, const BlockActivations& a,
                      const BlockGradients& d, TrainingAttention& attention, bool weights_now) const;
  // The linear layers' weight gradients that backward_input deferred, from the gradients it left
  // in d and the activations.
  void backward_weight(const FlatTensors& grads, const BlockActivations& a, const BlockGradients& d) const;

 private:
  // forward() up to the MLP's activation: what backward reads, for full recomputation.
  void forward_to_activation(const FlatTensors& weights, Tensor x, const BlockActivations& a,
                             AttentionCore& attention) const;

  int layer_;
  size_t unit_;
  Recompute recompute_;
  MlpKind mlp_;
  Norm ln_1_, ln_2_;
  ColumnParallelLinear attn_qkv_, mlp_fc_;
  RowParallelLinear attn_proj_, mlp_proj_;
  ParallelRegions* parallel_;
};

}  // namespace dt
