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
// gradients are added into `grads` (f32). Each linear layer holds its per-linear state
// (model/linear_state.h), which no pass reads yet.
#pragma once

#include <optional>

#include "core/tensor.h"
#include "model/attention_core.h"
#include "model/block_tensors.h"
#include "model/layers.h"
#include "model/mlp.h"
#include "model/parallel_regions.h"
#include "model/parameters.h"
#include "model/qk_norm.h"
#include "model/recompute.h"

namespace dt {

class Block {
 public:
  // The block's communication goes through `regions`, its linear layers' state is in `states`
  // and `scope` says where its tokens lie in their sequences (all must outlive it; one rank's, none
  // and the micro-batch's own by default).
  Block(const ParameterLayout& layout, int layer, Recompute recompute,
        ParallelRegions& regions = ParallelRegions::single_rank(), const LinearStates& states = LinearStates::none(),
        const AttentionScope& scope = AttentionScope::local(), ExpertExchange& experts = ExpertExchange::single_rank());

  int layer() const { return layer_; }
  // The block's unit of the layout (model/parameters.h).
  size_t unit() const { return unit_; }
  Recompute recompute() const { return recompute_; }
  // The per-linear state of its linear layer `linear` ("attn.qkv"), as the layer holds it.
  const LinearStateView& linear_state(std::string_view linear) const;

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
  Norm ln_1_, ln_2_;
  ColumnParallelLinear attn_qkv_;
  std::optional<QkNorm> qk_norm_;  // where the model has query and key norms
  RowParallelLinear attn_proj_;
  std::unique_ptr<Mlp> mlp_;  // the MLP seam (model/mlp.h)
  ParallelRegions* parallel_;
};

}  // namespace dt
