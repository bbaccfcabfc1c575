// A block's MLP branch, from ln_2's output to the branch's output: the seam beside attention's
// (model/attention_core.h). A block reaches its MLP only through this interface, whose two
// implementations are a mixture of experts (model/moe_mlp.h) and the dense MLP,
//
//   mlp.proj(act(mlp.fc(x)))     act: GELU, or SwiGLU of mlp.fc's gate and up halves
//
// whose views are the block's (model/block_tensors.h): it reads
// a.ln2 (this rank's rows) and sets a.fch and a.fch_act; its output goes through a.proj_out (and
// a.branch under sequence parallelism); backward reads d.dout and uses d.dact, d.dfch, d.dtmp,
// d.dlocal and a.gathered as working space. Its linear layers communicate through the block's
// ParallelRegions.
#pragma once

#include <memory>

#include "model/attention_core.h"
#include "model/block_tensors.h"
#include "model/expert_exchange.h"
#include "model/layers.h"

namespace dt {

class Mlp {
 public:
  virtual ~Mlp() = default;
  // Sets what backward reads, from a.ln2: what full recomputation reruns.
  virtual void forward_to_activation(const FlatTensors& weights, const BlockActivations& a) const = 0;
  // The branch's output for this rank's rows, from what forward_to_activation set.
  virtual Tensor forward_output(const FlatTensors& weights, const BlockActivations& a) const = 0;
  // From d.dout, the branch output's gradient (this rank's rows): the gradient of a.ln2, its sum
  // over the tensor-parallel group started (wait on it before reading); with weights_now the
  // weights' gradients are added too, else backward_weight adds them later from d.
  virtual PendingSum backward_input(const FlatTensors& weights, const FlatTensors& grads, const BlockActivations& a,
                                    const BlockGradients& d, bool weights_now) const = 0;
  virtual void backward_weight(const FlatTensors& grads, const BlockActivations& a, const BlockGradients& d) const = 0;
  // The per-linear state its linear layer `linear` ("mlp.fc") holds (model/linear_state.h);
  // throws dt::Error for a layer it does not have.
  virtual const LinearStateView& linear_state(std::string_view linear) const = 0;
};

class DenseMlp final : public Mlp {
 public:
  // Block `layer`'s mlp.fc and mlp.proj of `layout`, communicating through `regions`, with
  // their state in `states`.
  DenseMlp(const ParameterLayout& layout, int layer, ParallelRegions& regions, const LinearStates& states);

  void forward_to_activation(const FlatTensors& weights, const BlockActivations& a) const override;
  Tensor forward_output(const FlatTensors& weights, const BlockActivations& a) const override;
  PendingSum backward_input(const FlatTensors& weights, const FlatTensors& grads, const BlockActivations& a,
                            const BlockGradients& d, bool weights_now) const override;
  void backward_weight(const FlatTensors& grads, const BlockActivations& a, const BlockGradients& d) const override;
  const LinearStateView& linear_state(std::string_view linear) const override;

 private:
  MlpKind kind_;
  ColumnParallelLinear fc_;
  RowParallelLinear proj_;
};

// Block `layer`'s MLP as its declaration says (model/block_declaration.h); `scope`: where the
// tokens it runs lie in their sequences (a mixture of experts' balance loss is per sequence);
// `experts`: where a mixture of experts' rows travel to the layout's experts.
std::unique_ptr<Mlp> make_mlp(const ParameterLayout& layout, int layer, ParallelRegions& regions,
                              const LinearStates& states = LinearStates::none(),
                              const AttentionScope& scope = AttentionScope::local(),
                              ExpertExchange& experts = ExpertExchange::single_rank());

}  // namespace dt
