#include "model/moe_mlp.h"

#include "core/device.h"
#include "kernels/add.h"
#include "kernels/convert.h"
#include "kernels/grouped_linear.h"
#include "kernels/linear.h"
#include "kernels/moe_router_loss.h"
#include "kernels/sigmoid_gate.h"
#include "kernels/swiglu.h"

namespace dt {

namespace k = kernels;

namespace {

// The first `rows` rows of an experts' tensor.
Tensor first(Tensor t, int64_t rows) { return t.slice_rows(0, rows); }

}  // namespace

MoeMlp::MoeMlp(const ParameterLayout& layout, int layer, const LinearStates& states, const AttentionScope& scope,
               ExpertExchange& exchange)
    : moe_(layout.config().moe),
      scope_(scope),
      exchange_(exchange),
      router_(&layout.find(block_prefix(layer) + "mlp.router.weight")),
      fc_(&layout.find(block_prefix(layer) + "mlp.experts.fc.weight")),
      proj_(&layout.find(block_prefix(layer) + "mlp.experts.proj.weight")),
      router_state_(states.of(layer, "mlp.router")),
      fc_state_(states.of(layer, "mlp.experts.fc")),
      proj_state_(states.of(layer, "mlp.experts.proj")) {
  for (const auto& [kind, state] : router_state_.all())
    if (kind == "expert_bias") bias_ = state;
  if (moe_.shared_hidden == 0) return;
  shared_fc_ = &layout.find(block_prefix(layer) + "mlp.shared.fc.weight");
  shared_proj_ = &layout.find(block_prefix(layer) + "mlp.shared.proj.weight");
  shared_fc_state_ = states.of(layer, "mlp.shared.fc"), shared_proj_state_ = states.of(layer, "mlp.shared.proj");
  if (!moe_.shared_gate) return;
  shared_gate_ = &layout.find(block_prefix(layer) + "mlp.shared_gate.weight");
  shared_gate_state_ = states.of(layer, "mlp.shared_gate");
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

Tensor MoeMlp::gate_weight(const FlatTensors& weights, const BlockActivations& a) const {
  const Tensor weight = weights.stored(*shared_gate_);
  if (weight.dtype == DType::f32) return weight;
  const Tensor widened = a.experts.router_weight.slice_rows(0, 1);
  k::convert(widened, weight);
  return widened;
}

k::MoeDispatch MoeMlp::dispatch(const ExpertActivations& e) const {
  return k::moe_dispatch(e.rows, e.experts, e.weights, moe_.experts, e.keep_all ? 0 : moe_.capacity(e.rows.dim(0)));
}

void MoeMlp::forward_to_activation(const FlatTensors& weights, const BlockActivations& a) const {
  const ExpertActivations& e = a.experts;
  const Tensor u = router_input(a);
  k::linear_forward(e.logits, u, router_weight(weights, a), Tensor{});
  k::moe_route_forward(e.scores, e.experts, e.weights, e.logits, bias_, moe_.routing);
  if (e.counts.defined()) {
    k::moe_router_stats(e.counts, Tensor{}, Tensor{}, e.scores, e.experts, Tensor{}, moe_.routing.score);
    scope_.sum_over_sequences(e.counts);
  }
  if (e.record != nullptr) record_losses(e);
  const k::MoeDispatch rows = dispatch(e);
  const ExpertRoute route = exchange_.route(rows);
  const int64_t X = route.rows();
  k::moe_permute_forward(first(e.sent, rows.rows()), a.ln2, e.rows);
  exchange_.dispatch(first(e.expert_in, X), first(e.sent, rows.rows()), route, e.staging);
  k::grouped_linear_forward(first(e.expert_fch, X), first(e.expert_in, X), weights.stored(*fc_), route.offsets);
  k::swiglu_forward(first(e.expert_act, X), first(e.expert_fch, X));
  if (shared_fc_ == nullptr) return;
  k::linear_forward(e.shared_fch, a.ln2, weights.stored(*shared_fc_), Tensor{});
  k::swiglu_forward(e.shared_act, e.shared_fch);
  if (shared_gate_ != nullptr)
    k::linear_forward(e.shared_gate.reshape({u.dim(0), 1}), u, gate_weight(weights, a), Tensor{});
}

Tensor MoeMlp::forward_output(const FlatTensors& weights, const BlockActivations& a) const {
  const ExpertActivations& e = a.experts;
  const k::MoeDispatch rows = dispatch(e);
  const ExpertRoute route = exchange_.route(rows);
  const int64_t R = rows.rows(), X = route.rows();
  k::grouped_linear_forward(first(e.result, X), first(e.expert_act, X), weights.stored(*proj_), route.offsets);
  exchange_.combine(first(e.expert_out, R), first(e.result, X), route, e.staging);
  k::moe_unpermute_forward(e.routed, first(e.expert_out, R), e.weights, e.rows);
  if (shared_fc_ != nullptr) {
    k::linear_forward(e.shared_out, e.shared_act, weights.stored(*shared_proj_), Tensor{});
    if (shared_gate_ != nullptr)
      k::sigmoid_gate_forward(e.routed, e.routed, e.shared_out, e.shared_gate);
    else
      k::add_forward(e.routed, e.routed, e.shared_out);
  }
  if (e.record != nullptr)
    for (int64_t x = 0; x < moe_.experts; ++x) {
      e.record->loads[x] += rows.rows_of(x) + rows.dropped[x];
      e.record->dropped += rows.dropped[x];
    }
  return e.routed;
}

double MoeMlp::balance_factor(const ExpertActivations& e) const {
  const int64_t here = e.scores.dim(0) / e.counts.dim(0);  // each sequence's tokens on this rank
  return static_cast<double>(moe_.aux_loss_coef) * static_cast<double>(moe_.experts) /
         static_cast<double>(moe_.routing.top_k * scope_.sequence_length(here));
}

void MoeMlp::record_losses(const ExpertActivations& e) const {
  if (moe_.aux_loss_coef == 0 && moe_.z_loss_coef == 0) return;
  k::moe_router_stats(Tensor{}, e.probs, e.z, e.scores, Tensor{}, e.logits, moe_.routing.score);
  if (moe_.aux_loss_coef > 0) {
    const std::vector<float> counts = host_values<float>(e.counts), probs = host_values<float>(e.probs);
    double sum = 0;
    for (size_t i = 0; i < counts.size(); ++i) sum += static_cast<double>(counts[i]) * probs[i];
    e.record->aux_loss += balance_factor(e) * sum;
  }
  if (moe_.z_loss_coef > 0)
    for (const float z : host_values<float>(e.z)) e.record->z_loss += static_cast<double>(moe_.z_loss_coef) * z;
}

void MoeMlp::route_backward(const ExpertActivations& e, const ExpertGradients& g) const {
  Tensor dscores;
  if (e.counts.defined()) {
    dscores = g.dscores;
    k::moe_balance_backward(dscores, e.counts, e.scores, static_cast<float>(balance_factor(e) * g.loss_scale),
                            moe_.routing.score);
  }
  k::moe_route_backward(g.dlogits, g.dweights, dscores, e.scores, e.experts, moe_.routing);
  if (moe_.z_loss_coef > 0) k::moe_z_loss_backward(g.dlogits, e.logits, moe_.z_loss_coef * g.loss_scale);
}

Tensor MoeMlp::shared_output_gradient(const BlockActivations& a, const BlockGradients& d) const {
  if (shared_gate_ == nullptr) return d.dout;
  const ExpertGradients& g = d.experts;
  k::sigmoid_gate_backward(g.dshared_out, g.dshared_gate, d.dout, a.experts.shared_out, a.experts.shared_gate);
  return g.dshared_out;
}

void MoeMlp::shared_backward(const FlatTensors* weights, const FlatTensors* grads, const BlockActivations& a,
                             const BlockGradients& d, Tensor dln2, Tensor scratch) const {
  const ExpertActivations& e = a.experts;
  const ExpertGradients& g = d.experts;
  const Tensor dh = shared_output_gradient(a, d);
  if (weights != nullptr) {
    k::linear_backward_input(g.dshared_act, dh, weights->stored(*shared_proj_));
    k::swiglu_backward(g.dshared_fch, g.dshared_act, e.shared_fch);
    k::linear_backward_input(scratch, g.dshared_fch, weights->stored(*shared_fc_));
    k::accumulate(dln2, scratch);
  }
  if (grads == nullptr) return;
  k::linear_backward_weight(grads->stored(*shared_proj_), Tensor{}, dh, e.shared_act);
  k::linear_backward_weight(grads->stored(*shared_fc_), Tensor{}, g.dshared_fch, a.ln2);
}

Tensor MoeMlp::combine_backward(const BlockActivations& a, const BlockGradients& d, const k::MoeDispatch& rows,
                                const ExpertRoute& route) const {
  const ExpertActivations& e = a.experts;
  const ExpertGradients& g = d.experts;
  const int64_t R = rows.rows(), X = route.rows();
  k::moe_unpermute_backward(first(g.dexpert_out, R), g.dweights, d.dout, first(e.expert_out, R), e.weights, e.rows);
  exchange_.dispatch(first(g.dresult, X), first(g.dexpert_out, R), route, e.staging);
  return first(g.dresult, X);
}

PendingSum MoeMlp::backward_input(const FlatTensors& weights, const FlatTensors& grads, const BlockActivations& a,
                                  const BlockGradients& d, bool weights_now) const {
  const ExpertActivations& e = a.experts;
  const ExpertGradients& g = d.experts;
  const k::MoeDispatch rows = dispatch(e);
  const ExpertRoute route = exchange_.route(rows);
  const int64_t R = rows.rows(), X = route.rows();
  const Tensor dy = combine_backward(a, d, rows, route), dact = first(g.dexpert_act, X), dfch = first(g.dexpert_fch, X);
  k::grouped_linear_backward_input(dact, dy, weights.stored(*proj_), route.offsets);
  if (weights_now) k::grouped_linear_backward_weight(grads.stored(*proj_), dy, first(e.expert_act, X), route.offsets);
  k::swiglu_backward(dfch, dact, first(e.expert_fch, X));
  // The experts' input's gradient takes dy's memory: nothing reads dy after this (a deferred
  // weight pass computes it again). It returns to this rank's rows in dexpert_out.
  const Tensor dexpert_in = dy;
  k::grouped_linear_backward_input(dexpert_in, dfch, weights.stored(*fc_), route.offsets);
  if (weights_now) k::grouped_linear_backward_weight(grads.stored(*fc_), dfch, first(e.expert_in, X), route.offsets);
  exchange_.combine(first(g.dexpert_out, R), dexpert_in, route, e.staging);
  const Tensor dln2 = first(d.dtmp, a.ln2.dim(0));
  k::moe_permute_backward(dln2, first(g.dexpert_out, R), e.rows);
  // The shared expert's share, through dy's memory, free again.
  if (shared_fc_ != nullptr)
    shared_backward(&weights, weights_now ? &grads : nullptr, a, d, dln2, first(g.dexpert_out, dln2.dim(0)));
  // The router's share (and the shared expert's gate's), in f32, then added in the activations'
  // precision (narrowed into dy's memory where that is 16-bit).
  route_backward(e, g);
  const Tensor u = router_input(a);
  k::linear_backward_input(g.drouter_in, g.dlogits, router_weight(weights, a));
  if (weights_now) k::linear_backward_weight(grads.stored(*router_), Tensor{}, g.dlogits, u);
  if (shared_gate_ != nullptr) {
    const Tensor dz = g.dshared_gate.reshape({u.dim(0), 1});
    k::linear_backward_input(g.dgate_in, dz, gate_weight(weights, a));
    k::accumulate(g.drouter_in, g.dgate_in);
    if (weights_now) k::linear_backward_weight(grads.stored(*shared_gate_), Tensor{}, dz, u);
  }
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
  const ExpertRoute route = exchange_.route(rows);
  const int64_t X = route.rows();
  const Tensor dy = combine_backward(a, d, rows, route);
  k::grouped_linear_backward_weight(grads.stored(*proj_), dy, first(e.expert_act, X), route.offsets);
  k::grouped_linear_backward_weight(grads.stored(*fc_), first(g.dexpert_fch, X), first(e.expert_in, X), route.offsets);
  // The router's input is widened again: its scratch has served other blocks since.
  const Tensor u = router_input(a);
  k::linear_backward_weight(grads.stored(*router_), Tensor{}, g.dlogits, u);
  if (shared_fc_ == nullptr) return;
  shared_backward(nullptr, &grads, a, d, Tensor{}, Tensor{});
  if (shared_gate_ != nullptr)
    k::linear_backward_weight(grads.stored(*shared_gate_), Tensor{}, g.dshared_gate.reshape({u.dim(0), 1}), u);
}

const LinearStateView& MoeMlp::linear_state(std::string_view linear) const {
  if (linear == "mlp.router") return router_state_;
  if (linear == "mlp.experts.fc") return fc_state_;
  if (linear == "mlp.experts.proj") return proj_state_;
  if (shared_fc_ != nullptr && linear == "mlp.shared.fc") return shared_fc_state_;
  if (shared_fc_ != nullptr && linear == "mlp.shared.proj") return shared_proj_state_;
  if (shared_gate_ != nullptr && linear == "mlp.shared_gate") return shared_gate_state_;
  throw Error(str("the mixture of experts has no linear layer '", linear,
                  "'; its linear layers are mlp.router, mlp.experts.fc, mlp.experts.proj",
                  shared_fc_ != nullptr ? ", mlp.shared.fc, mlp.shared.proj" : "",
                  shared_gate_ != nullptr ? ", mlp.shared_gate" : ""));
}

}  // namespace dt
