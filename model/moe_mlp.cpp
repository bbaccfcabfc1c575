#include "model/moe_mlp.h"

#include "core/device.h"
#include "kernels/add.h"
#include "kernels/convert.h"
#include "kernels/grouped_linear.h"
#include "kernels/linear.h"
#include "kernels/moe_router_loss.h"
#include "kernels/swiglu.h"

namespace dt {

namespace k = kernels;

namespace {

// The first `rows` rows of an experts' tensor.
Tensor first(Tensor t, int64_t rows) { return t.slice_rows(0, rows); }

}  // namespace

MoeMlp::MoeMlp(const ParameterLayout& layout, int layer, const LinearStates& states, const AttentionScope& scope)
    : routing_(layout.config().moe.routing),
      experts_(layout.config().moe.experts),
      aux_loss_coef_(layout.config().moe.aux_loss_coef),
      z_loss_coef_(layout.config().moe.z_loss_coef),
      scope_(scope),
      router_(&layout.find(block_prefix(layer) + "mlp.router.weight")),
      fc_(&layout.find(block_prefix(layer) + "mlp.experts.fc.weight")),
      proj_(&layout.find(block_prefix(layer) + "mlp.experts.proj.weight")),
      router_state_(states.of(layer, "mlp.router")),
      fc_state_(states.of(layer, "mlp.experts.fc")),
      proj_state_(states.of(layer, "mlp.experts.proj")) {
  for (const auto& [kind, state] : router_state_.all())
    if (kind == "expert_bias") bias_ = state;
}

Tensor MoeMlp::router_input(const BlockActivations& a) {
  if (a.ln2.dtype == DType::f32) return a.ln2;
  k::convert(a.experts.router_in, a.ln2);
  return a.experts.router_in;
}

Tensor MoeMlp::router_weight(const FlatTensors& weights, const BlockActivations& a) const {
  const Tensor weight = weights.stored(*router_);
  if (weight.dtype == DType::f32) return weight;
  k::convert(a.experts.router_weight, weight);
  return a.experts.router_weight;
}

k::MoeDispatch MoeMlp::dispatch(const ExpertActivations& e) const {
  return k::moe_dispatch(e.rows, e.experts, e.weights, experts_, /*capacity=*/0);
}

void MoeMlp::forward_to_activation(const FlatTensors& weights, const BlockActivations& a) const {
  const ExpertActivations& e = a.experts;
  k::linear_forward(e.logits, router_input(a), router_weight(weights, a), Tensor{});
  k::moe_route_forward(e.scores, e.experts, e.weights, e.logits, bias_, routing_);
  if (e.counts.defined()) {
    k::moe_router_stats(e.counts, Tensor{}, Tensor{}, e.scores, e.experts, Tensor{}, routing_.score);
    scope_.sum_over_sequences(e.counts);
  }
  if (e.record != nullptr) record_losses(e);
  const k::MoeDispatch rows = dispatch(e);
  const int64_t R = rows.rows();
  k::moe_permute_forward(first(e.expert_in, R), a.ln2, e.rows);
  k::grouped_linear_forward(first(e.expert_fch, R), first(e.expert_in, R), weights.stored(*fc_), rows.offsets);
  k::swiglu_forward(first(e.expert_act, R), first(e.expert_fch, R));
}

Tensor MoeMlp::forward_output(const FlatTensors& weights, const BlockActivations& a) const {
  const ExpertActivations& e = a.experts;
  const k::MoeDispatch rows = dispatch(e);
  const int64_t R = rows.rows();
  k::grouped_linear_forward(first(e.expert_out, R), first(e.expert_act, R), weights.stored(*proj_), rows.offsets);
  k::moe_unpermute_forward(e.routed, first(e.expert_out, R), e.weights, e.rows);
  if (e.record != nullptr)
    for (int64_t x = 0; x < experts_; ++x) e.record->loads[x] += rows.rows_of(x);
  return e.routed;
}

double MoeMlp::balance_factor(const ExpertActivations& e) const {
  const int64_t here = e.scores.dim(0) / e.counts.dim(0);  // each sequence's tokens on this rank
  return static_cast<double>(aux_loss_coef_) * static_cast<double>(experts_) /
         static_cast<double>(routing_.top_k * scope_.sequence_length(here));
}

void MoeMlp::record_losses(const ExpertActivations& e) const {
  if (aux_loss_coef_ == 0 && z_loss_coef_ == 0) return;
  k::moe_router_stats(Tensor{}, e.probs, e.z, e.scores, Tensor{}, e.logits, routing_.score);
  if (aux_loss_coef_ > 0) {
    const std::vector<float> counts = host_values<float>(e.counts), probs = host_values<float>(e.probs);
    double sum = 0;
    for (size_t i = 0; i < counts.size(); ++i) sum += static_cast<double>(counts[i]) * probs[i];
    e.record->aux_loss += balance_factor(e) * sum;
  }
  if (z_loss_coef_ > 0)
    for (const float z : host_values<float>(e.z)) e.record->z_loss += static_cast<double>(z_loss_coef_) * z;
}

void MoeMlp::route_backward(const ExpertActivations& e, const ExpertGradients& g) const {
  Tensor dscores;
  if (e.counts.defined()) {
    dscores = g.dscores;
    k::moe_balance_backward(dscores, e.counts, e.scores, static_cast<float>(balance_factor(e) * g.loss_scale),
                            routing_.score);
  }
  k::moe_route_backward(g.dlogits, g.dweights, dscores, e.scores, e.experts, routing_);
  if (z_loss_coef_ > 0) k::moe_z_loss_backward(g.dlogits, e.logits, z_loss_coef_ * g.loss_scale);
}

void MoeMlp::combine_backward(const BlockActivations& a, const BlockGradients& d,
                              const k::MoeDispatch& rows) const {
  const ExpertActivations& e = a.experts;
  const int64_t R = rows.rows();
  k::moe_unpermute_backward(first(d.experts.dexpert_out, R), d.experts.dweights, d.dout, first(e.expert_out, R),
                            e.weights, e.rows);
}

PendingSum MoeMlp::backward_input(const FlatTensors& weights, const FlatTensors& grads, const BlockActivations& a,
                                  const BlockGradients& d, bool weights_now) const {
  const ExpertActivations& e = a.experts;
  const ExpertGradients& g = d.experts;
  const k::MoeDispatch rows = dispatch(e);
  const int64_t R = rows.rows();
  combine_backward(a, d, rows);
  const Tensor dy = first(g.dexpert_out, R), dact = first(g.dexpert_act, R), dfch = first(g.dexpert_fch, R);
  k::grouped_linear_backward_input(dact, dy, weights.stored(*proj_), rows.offsets);
  if (weights_now) k::grouped_linear_backward_weight(grads.stored(*proj_), dy, first(e.expert_act, R), rows.offsets);
  k::swiglu_backward(dfch, dact, first(e.expert_fch, R));
  // The experts' input's gradient takes dy's memory: nothing reads dy after this (a deferred
  // weight pass computes it again).
  const Tensor dexpert_in = dy;
  k::grouped_linear_backward_input(dexpert_in, dfch, weights.stored(*fc_), rows.offsets);
  if (weights_now) k::grouped_linear_backward_weight(grads.stored(*fc_), dfch, first(e.expert_in, R), rows.offsets);
  const Tensor dln2 = first(d.dtmp, a.ln2.dim(0));
  k::moe_permute_backward(dln2, dexpert_in, e.rows);
  // The router's share, in f32, then added in the activations' precision (narrowed into dy's
  // memory, free again, where that is 16-bit).
  route_backward(e, g);
  k::linear_backward_input(g.drouter_in, g.dlogits, router_weight(weights, a));
  if (weights_now) k::linear_backward_weight(grads.stored(*router_), Tensor{}, g.dlogits, router_input(a));
  Tensor drouter = g.drouter_in;
  if (dln2.dtype != DType::f32) {
    drouter = first(g.dexpert_out, dln2.dim(0));
    k::convert(drouter, g.drouter_in);
  }
  k::add_forward(dln2, dln2, drouter);
  return {dln2, {}};
}

void MoeMlp::backward_weight(const FlatTensors& grads, const BlockActivations& a, const BlockGradients& d) const {
  const ExpertActivations& e = a.experts;
  const ExpertGradients& g = d.experts;
  const k::MoeDispatch rows = dispatch(e);
  const int64_t R = rows.rows();
  combine_backward(a, d, rows);
  k::grouped_linear_backward_weight(grads.stored(*proj_), first(g.dexpert_out, R), first(e.expert_act, R),
                                    rows.offsets);
  k::grouped_linear_backward_weight(grads.stored(*fc_), first(g.dexpert_fch, R), first(e.expert_in, R), rows.offsets);
  // The router's input is widened again: its scratch has served other blocks since.
  k::linear_backward_weight(grads.stored(*router_), Tensor{}, g.dlogits, router_input(a));
}

const LinearStateView& MoeMlp::linear_state(std::string_view linear) const {
  if (linear == "mlp.router") return router_state_;
  if (linear == "mlp.experts.fc") return fc_state_;
  if (linear == "mlp.experts.proj") return proj_state_;
  throw Error(str("the mixture of experts has no linear layer '", linear,
                  "'; its linear layers are mlp.router, mlp.experts.fc, mlp.experts.proj"));
}

}  // namespace dt
