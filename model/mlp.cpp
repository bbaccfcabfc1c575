#include "model/mlp.h"

#include "kernels/gelu.h"
#include "kernels/swiglu.h"
#include "model/moe_mlp.h"

namespace dt {

namespace k = kernels;

DenseMlp::DenseMlp(const ParameterLayout& layout, int layer, ParallelRegions& regions, const LinearStates& states)
    : kind_(layout.config().traits().mlp),
      fc_(layout, block_prefix(layer) + "mlp.fc", regions, states.of(layer, "mlp.fc")),
      proj_(layout, block_prefix(layer) + "mlp.proj", regions, states.of(layer, "mlp.proj")) {}

void DenseMlp::forward_to_activation(const FlatTensors& weights, const BlockActivations& a) const {
  fc_.forward(weights, a.fch, a.ln2, a.gathered);
  if (kind_ == MlpKind::gelu)
    k::gelu_forward(a.fch_act, a.fch);
  else
    k::swiglu_forward(a.fch_act, a.fch);
}

Tensor DenseMlp::forward_output(const FlatTensors& weights, const BlockActivations& a) const {
  return proj_.forward(weights, a.proj_out, a.fch_act, a.branch);
}

PendingSum DenseMlp::backward_input(const FlatTensors& weights, const FlatTensors& grads, const BlockActivations& a,
                                    const BlockGradients& d, bool weights_now) const {
  const Tensor dout = proj_.output_gradient(d.dout, a.gathered);
  proj_.backward_input(weights, d.dact, dout);
  if (weights_now) proj_.backward_weight(grads, dout, a.fch_act);
  if (kind_ == MlpKind::gelu)
    k::gelu_backward(d.dfch, a.fch, d.dact);
  else
    k::swiglu_backward(d.dfch, d.dact, a.fch);
  // The weight's gradient while the input's is summed over the group (its input gathered again
  // with sequence parallelism: gathered held dout until now).
  PendingSum dinput = fc_.backward_input(weights, d.dtmp, d.dfch, d.dlocal);
  if (weights_now) fc_.backward_weight(grads, d.dfch, a.ln2, a.gathered);
  return dinput;
}

void DenseMlp::backward_weight(const FlatTensors& grads, const BlockActivations& a, const BlockGradients& d) const {
  proj_.backward_weight(grads, proj_.output_gradient(d.dout, a.gathered), a.fch_act);
  fc_.backward_weight(grads, d.dfch, a.ln2, a.gathered);
}

const LinearStateView& DenseMlp::linear_state(std::string_view linear) const {
  if (linear == "mlp.fc") return fc_.state();
  if (linear == "mlp.proj") return proj_.state();
  throw Error(str("the dense MLP has no linear layer '", linear, "'; its linear layers are mlp.fc, mlp.proj"));
}

std::unique_ptr<Mlp> make_mlp(const ParameterLayout& layout, int layer, ParallelRegions& regions,
                              const LinearStates& states, const AttentionScope& scope, ExpertExchange& experts) {
  if (!layout.config().moe_block(layer)) return std::make_unique<DenseMlp>(layout, layer, regions, states);
  const ExpertShard held = layout.expert_shard(), travels = experts.shard();
  DT_CHECK(held.rank == travels.rank && held.size == travels.size, "a layout of expert-parallel rank ", held.rank,
           " of ", held.size, " with an exchange of rank ", travels.rank, " of ", travels.size);
  return std::make_unique<MoeMlp>(layout, layer, regions, states, scope, experts);
}

}  // namespace dt
