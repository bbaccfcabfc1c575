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
// assignment gets a row. The views are a.experts' and d.experts' (model/block_tensors.h). The
// rows' layout is computed again from the kept choice wherever a pass needs it on the host
// (moe_dispatch: the same rows, from the same experts), so no pass keeps host state per
// micro-batch.
//
// Each rank routes its own rows. The router, the shared expert and their state are whole on every
// rank; the experts are this rank's (all of them without expert parallelism), and the rows go to
// them and come back through an ExpertExchange (model/expert_exchange.h): the grouped GEMMs run
// over the rows this rank's experts receive, laid out expert by expert (the route's offsets). A
// run with tensor parallelism (whose ranks hold the same rows without sequence parallelism) is
// refused.
#pragma once

#include "kernels/moe_permute.h"
#include "kernels/moe_route.h"
#include "model/expert_exchange.h"
#include "model/mlp.h"

namespace dt {

class MoeMlp final : public Mlp {
 public:
  // Block `layer`'s mlp.router, mlp.experts.fc and mlp.experts.proj of `layout`, with their state
  // in `states`.
  // `scope`: where the tokens it runs lie in their sequences; `exchange`: where its rows travel to
  // the experts (this rank's, of the layout's ExpertShard) and back.
  MoeMlp(const ParameterLayout& layout, int layer, const LinearStates& states, const AttentionScope& scope,
         ExpertExchange& exchange);

  void forward_to_activation(const FlatTensors& weights, const BlockActivations& a) const override;
  Tensor forward_output(const FlatTensors& weights, const BlockActivations& a) const override;
  PendingSum backward_input(const FlatTensors& weights, const FlatTensors& grads, const BlockActivations& a,
                            const BlockGradients& d, bool weights_now) const override;
  void backward_weight(const FlatTensors& grads, const BlockActivations& a, const BlockGradients& d) const override;
  const LinearStateView& linear_state(std::string_view linear) const override;

 private:
  // The router's input and weight in f32: a.ln2 and its weight, or their widened copies; the shared
  // expert's gate weight likewise (into the router weight's scratch).
  static Tensor router_input(const BlockActivations& a);
  Tensor router_weight(const FlatTensors& weights, const BlockActivations& a) const;
  Tensor gate_weight(const FlatTensors& weights, const BlockActivations& a) const;
  // The shared expert's gradients: its output's (g.dshared_out where gated, else d.dout itself), and
  // with `weights` its input's added into dln2 (through `scratch`, (P, C)) and the gate logit's
  // (g.dshared_gate); with `grads` its weights', from what g holds (g.dshared_fch, computed
  // here when `weights` is given).
  Tensor shared_output_gradient(const BlockActivations& a, const BlockGradients& d) const;
  void shared_backward(const FlatTensors* weights, const FlatTensors* grads, const BlockActivations& a,
                       const BlockGradients& d, Tensor dln2, Tensor scratch) const;
  // The rows' layout of a.experts' kept choice (sets a.experts.rows again, to the same values).
  kernels::MoeDispatch dispatch(const ExpertActivations& e) const;
  // From the routed output's gradient: the gradients of the routing weights and of the experts'
  // output, into d.dexpert_out and from there to the experts, whose gradient (d.dresult) it returns.
  Tensor combine_backward(const BlockActivations& a, const BlockGradients& d, const kernels::MoeDispatch& rows,
                          const ExpertRoute& route) const;
  // The routers' losses of the micro-batch a training forward routed, added to its record.
  void record_losses(const ExpertActivations& e) const;
  // The balance loss's factor aux_loss_coef · E / (k T) for e's sequences, T their whole length.
  double balance_factor(const ExpertActivations& e) const;
  // From the routing weights' gradient (g.dweights): the router's logits' (g.dlogits), with the
  // routers' losses' gradients.
  void route_backward(const ExpertActivations& e, const ExpertGradients& g) const;

  MoeConfig moe_;  // the model's: its routing, losses and capacity
  const AttentionScope& scope_;
  ExpertExchange& exchange_;
  const ParamInfo *router_, *fc_, *proj_;
  const ParamInfo *shared_fc_ = nullptr, *shared_proj_ = nullptr, *shared_gate_ = nullptr;  // where there are
  LinearStateView router_state_, fc_state_, proj_state_, shared_fc_state_, shared_proj_state_, shared_gate_state_;
  Tensor bias_;  // the router's "expert_bias" state, where the model balances by bias (model/expert_balance.h)
};

}  // namespace dt
