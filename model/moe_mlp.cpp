#include "model/moe_mlp.h"

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/add.h"
#include "kernels/convert.h"
#include "kernels/linear.h"
#include "kernels/moe_router_loss.h"
#include "kernels/sigmoid_gate.h"
#include "kernels/swiglu.h"

namespace dt {

namespace k = kernels;

namespace {

// The first `rows` rows of an experts' tensor.
Tensor first(Tensor t, int64_t rows) { return t.slice_rows(0, rows); }

// Block `layer`'s experts' layer `linear`, in FP8 where its state says.
GroupedLinearProduct experts_product(const ParameterLayout& layout, int layer, const std::string& linear,
                                     const LinearStates& states, const ExpertExchange& exchange) {
  const LinearStateView state = states.of(layer, linear);
  std::optional<Float8GroupedLinear> float8;
  if (state.float8() != nullptr)
    float8.emplace(*state.float8(), state, layout.config().moe.experts, exchange.shard(), exchange.group());
  return GroupedLinearProduct(&layout.find(block_prefix(layer) + linear + ".weight"), std::move(float8));
}

}  // namespace

MoeMlp::MoeMlp(const ParameterLayout& layout, int layer, ParallelRegions& regions, const LinearStates& states,
               const AttentionScope& scope, ExpertExchange& exchange)
    : moe_(layout.config().moe),
      regions_(regions),
      scope_(scope),
      exchange_(exchange),
      router_(&layout.find(block_prefix(layer) + "mlp.router.weight")),
      fc_(experts_product(layout, layer, "mlp.experts.fc", states, exchange)),
      proj_(experts_product(layout, layer, "mlp.experts.proj", states, exchange)),
      router_state_(states.of(layer, "mlp.router")),
      fc_state_(states.of(layer, "mlp.experts.fc")),
      proj_state_(states.of(layer, "mlp.experts.proj")) {
  for (const auto& [kind, state] : router_state_.all())
    if (kind == "expert_bias") bias_ = state;
  if (moe_.shared_hidden == 0) return;
  shared_fc_state_ = states.of(layer, "mlp.shared.fc"), shared_proj_state_ = states.of(layer, "mlp.shared.proj");
  shared_fc_.emplace(&layout.find(block_prefix(layer) + "mlp.shared.fc.weight"), nullptr, false,
                     float8_products(shared_fc_state_, LinearStyle::column));
  shared_proj_.emplace(&layout.find(block_prefix(layer) + "mlp.shared.proj.weight"), nullptr, false,
                       float8_products(shared_proj_state_, LinearStyle::row));
  if (!moe_.shared_gate) return;
  shared_gate_ = &layout.find(block_prefix(layer) + "mlp.shared_gate.weight");
  shared_gate_state_ = states.of(layer, "mlp.shared_gate");
}

Tensor MoeMlp::whole_input(const BlockActivations& a) const { return regions_.column_input(a.ln2, a.gathered); }

Tensor MoeMlp::local(Tensor whole) const {
  const k::FlatRange mine = regions_.rows(whole.dim(0));
  return whole.slice_rows(mine.begin, mine.size());
}

Tensor MoeMlp::router_input(const BlockActivations& a, Tensor x) {
  if (x.dtype == DType::f32) return x;
  k::convert(a.experts.router_in, x);
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
  const Tensor x = whole_input(a), u = router_input(a, x);
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
  k::moe_permute_forward(first(e.sent, rows.rows()), x, e.rows);
  exchange_.dispatch(first(e.expert_in, X), first(e.sent, rows.rows()), route, e.staging);
  fc_.forward(weights, first(e.expert_fch, X), first(e.expert_in, X), route);
  k::swiglu_forward(first(e.expert_act, X), first(e.expert_fch, X));
  if (!shared_fc_) return;
  shared_fc_->forward(weights, e.shared_fch, x);
  k::swiglu_forward(e.shared_act, e.shared_fch);
  if (shared_gate_ != nullptr)
    k::linear_forward(e.shared_gate.reshape({a.ln2.dim(0), 1}), local(u), gate_weight(weights, a), Tensor{});
}

Tensor MoeMlp::forward_output(const FlatTensors& weights, const BlockActivations& a) const {
  const ExpertActivations& e = a.experts;
  const k::MoeDispatch rows = dispatch(e);
  const ExpertRoute route = exchange_.route(rows);
  const int64_t R = rows.rows(), X = route.rows();
  proj_.forward(weights, first(e.result, X), first(e.expert_act, X), route);
  exchange_.combine(first(e.expert_out, R), first(e.result, X), route, e.staging);
  k::moe_unpermute_forward(e.routed, first(e.expert_out, R), e.weights, e.rows);
  const Tensor out = local(e.routed);
  if (shared_fc_) {
    // The shared expert's partial output (all rows) summed over the group: into its kept rows.
    const Tensor partial = regions_.sequence_parallel() ? a.proj_out : e.shared_out;
    shared_proj_->forward(weights, partial, e.shared_act);
    const Tensor shared = regions_.row_output(partial, e.shared_out);
    if (shared_gate_ != nullptr)
      k::sigmoid_gate_forward(out, out, shared, e.shared_gate);
    else
      k::add_forward(out, out, shared);
  }
  if (e.record != nullptr)
    for (int64_t x = 0; x < moe_.experts; ++x) {
      e.record->loads[x] += rows.rows_of(x) + rows.dropped[x];
      e.record->dropped += rows.dropped[x];
    }
  return out;
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

Tensor MoeMlp::shared_output_gradient(const BlockActivations& a, const BlockGradients& d, Tensor dout) const {
  if (shared_gate_ == nullptr) return dout;
  const ExpertGradients& g = d.experts;
  k::sigmoid_gate_backward(g.dshared_out, g.dshared_gate, d.dout, a.experts.shared_out, a.experts.shared_gate);
  return regions_.row_output_gradient(g.dshared_out, a.gathered);
}

void MoeMlp::shared_backward(const FlatTensors& weights, const BlockActivations& a, const BlockGradients& d, Tensor dh,
                             Tensor dln2, Tensor scratch) const {
  const ExpertGradients& g = d.experts;
  shared_proj_->backward_input(weights, g.dshared_act, dh);
  k::swiglu_backward(g.dshared_fch, g.dshared_act, a.experts.shared_fch);
  shared_fc_->backward_input(weights, scratch, g.dshared_fch);
  PendingSum summed = regions_.column_input_gradient(scratch, d.dlocal);
  summed.done.wait();
  k::accumulate(dln2, summed.value);
}

void MoeMlp::gate_weight_gradient(const FlatTensors& grads, Tensor dz, Tensor u) const {
  const Tensor dweight = grads.stored(*shared_gate_);
  if (!regions_.sequence_parallel()) return k::linear_backward_weight(dweight, Tensor{}, dz, u);
  // This rank's rows' share into a zeroed buffer, summed over the group, then added: every rank
  // adds the whole rows' gradient, the same bits.
  const Buffer partial(dweight.bytes(), MemTag::workspace, dweight.device);
  const Tensor share = partial.view(dweight.dtype, dweight.shape);
  k::linear_backward_weight(share, Tensor{}, dz, u);
  regions_.sum_partial_gradients(share);
  k::add_forward(dweight, dweight, share);
}

Tensor MoeMlp::combine_backward(const BlockActivations& a, const BlockGradients& d, Tensor dout,
                                const k::MoeDispatch& rows, const ExpertRoute& route) const {
  const ExpertActivations& e = a.experts;
  const ExpertGradients& g = d.experts;
  const int64_t R = rows.rows(), X = route.rows();
  k::moe_unpermute_backward(first(g.dexpert_out, R), g.dweights, dout, first(e.expert_out, R), e.weights, e.rows);
  exchange_.dispatch(first(g.dresult, X), first(g.dexpert_out, R), route, e.staging);
  return first(g.dresult, X);
}

PendingSum MoeMlp::backward_input(const FlatTensors& weights, const FlatTensors& grads, const BlockActivations& a,
                                  const BlockGradients& d, bool weights_now) const {
  const ExpertActivations& e = a.experts;
  const ExpertGradients& g = d.experts;
  const k::MoeDispatch rows = dispatch(e);
  const ExpertRoute route = exchange_.route(rows);
  const int64_t N = e.scores.dim(0), R = rows.rows(), X = route.rows();
  // The output's gradient for all rows (gathered into a.gathered with sequence parallelism).
  const Tensor dout = regions_.row_output_gradient(d.dout, a.gathered);
  const Tensor dy = combine_backward(a, d, dout, rows, route);
  const Tensor dact = first(g.dexpert_act, X), dfch = first(g.dexpert_fch, X);
  proj_.backward_input(weights, dact, dy, route);
  if (weights_now) proj_.backward_weight(grads, dy, first(e.expert_act, X), route);
  k::swiglu_backward(dfch, dact, first(e.expert_fch, X));
  // The experts' input's gradient takes dy's memory: nothing reads dy after this (a deferred
  // weight pass computes it again). It returns to this rank's rows in dexpert_out.
  const Tensor dexpert_in = dy;
  fc_.backward_input(weights, dexpert_in, dfch, route);
  if (weights_now) fc_.backward_weight(grads, dfch, first(e.expert_in, X), route);
  exchange_.combine(first(g.dexpert_out, R), dexpert_in, route, e.staging);
  const Tensor dx = first(d.dtmp, N);
  k::moe_permute_backward(dx, first(g.dexpert_out, R), e.rows);
  // From here this rank's rows: the routed share is the same on every rank of the group, the
  // shared expert's a part of the sum, summed over it (through dy's memory, free again).
  const Tensor dln2 = local(dx);
  if (shared_fc_) {
    const Tensor dh = shared_output_gradient(a, d, dout);
    shared_backward(weights, a, d, dh, dln2, first(g.dexpert_out, N));
    if (weights_now) shared_proj_->backward_weight(grads, dh, e.shared_act);
  }
  // The router's share (and the shared expert's gate's), in f32, then added in the activations'
  // precision (narrowed into dy's memory where that is 16-bit).
  const Tensor x = whole_input(a), u = router_input(a, x);
  if (weights_now && shared_fc_) shared_fc_->backward_weight(grads, g.dshared_fch, x);
  route_backward(e, g);
  k::linear_backward_input(g.drouter_in, g.dlogits, router_weight(weights, a));
  if (weights_now) k::linear_backward_weight(grads.stored(*router_), Tensor{}, g.dlogits, u);
  Tensor drouter = local(g.drouter_in);
  if (shared_gate_ != nullptr) {
    const Tensor dz = g.dshared_gate.reshape({dln2.dim(0), 1});
    k::linear_backward_input(g.dgate_in, dz, gate_weight(weights, a));
    k::accumulate(drouter, g.dgate_in);
    if (weights_now) gate_weight_gradient(grads, dz, local(u));
  }
  if (dln2.dtype != DType::f32) {
    const Tensor narrowed = first(g.dexpert_out, dln2.dim(0));
    k::convert(narrowed, drouter);
    drouter = narrowed;
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
  const Tensor dout = regions_.row_output_gradient(d.dout, a.gathered);
  const Tensor dy = combine_backward(a, d, dout, rows, route);
  proj_.backward_weight(grads, dy, first(e.expert_act, X), route);
  fc_.backward_weight(grads, first(g.dexpert_fch, X), first(e.expert_in, X), route);
  if (shared_fc_) shared_proj_->backward_weight(grads, shared_output_gradient(a, d, dout), e.shared_act);
  // The input is gathered and the router's widened again: their buffers have served other blocks since.
  const Tensor x = whole_input(a), u = router_input(a, x);
  k::linear_backward_weight(grads.stored(*router_), Tensor{}, g.dlogits, u);
  if (!shared_fc_) return;
  shared_fc_->backward_weight(grads, g.dshared_fch, x);
  if (shared_gate_ != nullptr) gate_weight_gradient(grads, g.dshared_gate.reshape({a.ln2.dim(0), 1}), local(u));
}

const LinearStateView& MoeMlp::linear_state(std::string_view linear) const {
  if (linear == "mlp.router") return router_state_;
  if (linear == "mlp.experts.fc") return fc_state_;
  if (linear == "mlp.experts.proj") return proj_state_;
  if (shared_fc_ && linear == "mlp.shared.fc") return shared_fc_state_;
  if (shared_fc_ && linear == "mlp.shared.proj") return shared_proj_state_;
  if (shared_gate_ != nullptr && linear == "mlp.shared_gate") return shared_gate_state_;
  throw Error(str("the mixture of experts has no linear layer '", linear,
                  "'; its linear layers are mlp.router, mlp.experts.fc, mlp.experts.proj",
                  shared_fc_ ? ", mlp.shared.fc, mlp.shared.proj" : "",
                  shared_gate_ != nullptr ? ", mlp.shared_gate" : ""));
}

}  // namespace dt
