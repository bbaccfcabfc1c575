// A mixture of experts behind the MLP seam (model/mlp.h), as Mixtral's sparse MoE block computes
// it: with u = ln_2's output (this rank's rows),
//
//   logits = u @ mlp.router^T                      in f32: u and the weight widened where 16-bit
//   scores, experts, weights = route(logits)       top_k of E (kernels/moe_route.h)
//   y[n] = sum over j of weights[n, j] · proj_e(swiglu(fc_e(u[n])))    e = experts[n, j]
//          + g[n] · shared.proj(swiglu(shared.fc(u[n])))                  where there is a shared expert
//
// with g[n] = sigmoid(u[n] · shared_gate) where it is gated (Qwen-MoE; the gate's logit in f32, as
// the router's, kernels/sigmoid_gate.h), else 1;
// with, where the model balances its experts by bias (model/expert_balance.h), that bias added to
// the scores to choose the experts. Within a capacity (MoeConfig::capacity_factor) each expert
// takes at most capacity(P) of the rank's P rows of the micro-batch, the assignments over it
// dropped lowest weight first (a token whose every assignment is dropped passes the layer on the
// residual stream alone); generation keeps every one (ExpertActivations::keep_all).
//
// The routers' auxiliary losses (kernels/moe_router_loss.h), where the model trains with them,
// are added to the loss the step minimizes, normalized as the token losses are: divided by the
// global batch's target count (train/step.h), so that neither changes with the layout or the
// micro-batch size. Each block adds
//
//   balance: aux_loss_coef · E / (k T) · sum over sequences s of sum_e counts[s, e] · probs[s, e]
//   z-loss:  z_loss_coef · sum over tokens n of logsumexp(logits[n])²
//
// T the whole sequence's length, counts and probs the sequence's assignments and summed
// probabilities: with nothing masked, the mean over sequences of Switch Transformer's
// E · sum_e f_e P_e taken over each sequence (DeepSeek-V3's sequence-wise loss, Megatron-Core's
// seq_aux_loss), and the mean over tokens of ST-MoE's z-loss. A sequence's counts are summed over
// the ranks that hold its other tokens (context parallelism) in forward. The token losses'
// gradient scale (Stage::set_loss_scale) scales their gradients too.
//
// The assignments are laid out expert by expert (kernels/moe_permute.h), so each expert's two
// projections are one grouped GEMM over its rows (kernels/grouped_linear.h); dropless: every
// assignment gets a row. Under FP8 training the experts' products run in FP8 as
// model/float8_grouped_linear.h says, the shared expert's as a linear layer's (model/float8_linear.h);
// the router and the gate do not. The views are a.experts' and d.experts' (model/block_tensors.h). The
// rows' layout is computed again from the kept choice wherever a pass needs it on the host
// (moe_dispatch: the same rows, from the same experts), so no pass keeps host state per
// micro-batch.
//
// Each rank routes its micro-batch's rows: under tensor parallelism every rank of the group all
// of them (with sequence parallelism its rows gathered first, as a column-parallel layer's input
// is), the same on each. The router, its gate and the experts are whole on every rank of the
// group, their gradients the same on each; the experts are this rank's (all of them without
// expert parallelism), and the rows go to them and come back through an ExpertExchange
// (model/expert_exchange.h): the grouped GEMMs run over the rows this rank's experts receive,
// laid out expert by expert (the route's offsets). The shared expert is split like the dense
// MLP (model/tensor_shard.h), its output summed over the group (Megatron's row-parallel g), its
// input's gradient too (f); the gate, on this rank's rows, has its weight's gradient summed over
// the group with sequence parallelism, as the norms' are. The cost: the routed experts' work is
// repeated on every rank of the tensor-parallel group (Megatron-Core spreads them over it as
// more expert-parallel ranks instead; docs/parallelism.md#expert-parallelism).
#pragma once

#include "kernels/moe_permute.h"
#include "kernels/moe_route.h"
#include "model/expert_exchange.h"
#include "model/layers.h"
#include "model/mlp.h"

namespace dt {

class MoeMlp final : public Mlp {
 public:
  // Block `layer`'s mlp.router, mlp.experts.fc and mlp.experts.proj of `layout`, with their state
  // in `states`.
  // `regions`: where its shared expert communicates, and with sequence parallelism where its
  // input is gathered; `scope`: where the tokens it runs lie in their sequences; `exchange`: where
  // its rows travel to the experts (this rank's, of the layout's ExpertShard) and back.
  MoeMlp(const ParameterLayout& layout, int layer, ParallelRegions& regions, const LinearStates& states,
         const AttentionScope& scope, ExpertExchange& exchange);

  void forward_to_activation(const FlatTensors& weights, const BlockActivations& a) const override;
  Tensor forward_output(const FlatTensors& weights, const BlockActivations& a) const override;
  PendingSum backward_input(const FlatTensors& weights, const FlatTensors& grads, const BlockActivations& a,
                            const BlockGradients& d, bool weights_now) const override;
  void backward_weight(const FlatTensors& grads, const BlockActivations& a, const BlockGradients& d) const override;
  const LinearStateView& linear_state(std::string_view linear) const override;

 private:
  // ln_2's output for all the micro-batch's rows: a.ln2, or with sequence parallelism every
  // rank's rows gathered into a.gathered. This rank's rows of an all-rows tensor.
  Tensor whole_input(const BlockActivations& a) const;
  Tensor local(Tensor whole) const;
  // The router's input and weight in f32: x (whole_input) and the weight, or their widened copies;
  // the shared expert's gate weight likewise (into the router weight's scratch).
  static Tensor router_input(const BlockActivations& a, Tensor x);
  Tensor router_weight(const FlatTensors& weights, const BlockActivations& a) const;
  Tensor gate_weight(const FlatTensors& weights, const BlockActivations& a) const;
  // The gradient of the shared expert's output for all rows, from the MLP's (`dout`, all rows): dout
  // itself, or where gated g.dshared_out's, gathered with sequence parallelism (setting the gate
  // logit's, g.dshared_gate, for this rank's rows).
  Tensor shared_output_gradient(const BlockActivations& a, const BlockGradients& d, Tensor dout) const;
  // From its output's gradient dh: the shared expert's input's, summed over the group (through
  // `scratch`, all rows), added into dln2 (this rank's rows), with g.dshared_act and g.dshared_fch.
  void shared_backward(const FlatTensors& weights, const BlockActivations& a, const BlockGradients& d, Tensor dh,
                       Tensor dln2, Tensor scratch) const;
  // The gate weight's gradient += from its logit's dz and input u, this rank's rows: summed over the
  // group with sequence parallelism, where the rows are a part.
  void gate_weight_gradient(const FlatTensors& grads, Tensor dz, Tensor u) const;
  // The rows' layout of a.experts' kept choice (sets a.experts.rows again, to the same values).
  kernels::MoeDispatch dispatch(const ExpertActivations& e) const;
  // From the routed output's gradient `dout` (all rows): the gradients of the routing weights and
  // of the experts' output, into d.dexpert_out and from there to the experts, whose gradient
  // (d.dresult) it returns.
  Tensor combine_backward(const BlockActivations& a, const BlockGradients& d, Tensor dout,
                          const kernels::MoeDispatch& rows, const ExpertRoute& route) const;
  // The routers' losses of the micro-batch a training forward routed, added to its record.
  void record_losses(const ExpertActivations& e) const;
  // The balance loss's factor aux_loss_coef · E / (k T) for e's sequences, T their whole length.
  double balance_factor(const ExpertActivations& e) const;
  // From the routing weights' gradient (g.dweights): the router's logits' (g.dlogits), with the
  // routers' losses' gradients.
  void route_backward(const ExpertActivations& e, const ExpertGradients& g) const;

  MoeConfig moe_;  // the model's: its routing, losses and capacity
  ParallelRegions& regions_;
  const AttentionScope& scope_;
  ExpertExchange& exchange_;
  const ParamInfo* router_;
  GroupedLinearProduct fc_, proj_;
  std::optional<LinearProduct> shared_fc_, shared_proj_;  // where there is a shared expert
  const ParamInfo* shared_gate_ = nullptr;                // where it is gated
  LinearStateView router_state_, fc_state_, proj_state_, shared_fc_state_, shared_proj_state_, shared_gate_state_;
  Tensor bias_;  // the router's "expert_bias" state, where the model balances by bias (model/expert_balance.h)
};

}  // namespace dt
