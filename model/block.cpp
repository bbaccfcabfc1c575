#include "model/block.h"

#include "core/device.h"
#include "kernels/add.h"

namespace dt {

namespace k = kernels;

namespace {

std::string prefix(int layer, const char* name) { return block_prefix(layer) + name; }

// dst = src, unless they are the same tensor (the gradient updated in place).
void copy_unless_same(Tensor dst, Tensor src) {
  if (dst.data != src.data) copy_bytes(dst.data, dst.device, src.data, src.device, dst.bytes());
}

}  // namespace

Block::Block(const ParameterLayout& layout, int layer, Recompute recompute, ParallelRegions& regions,
             const LinearStates& states, const AttentionScope& scope, ExpertExchange& experts)
    : layer_(layer),
      unit_(layout.block_unit(layer)),
      recompute_(recompute),
      ln_1_(layout, prefix(layer, "ln_1")),
      ln_2_(layout, prefix(layer, "ln_2")),
      attn_qkv_(layout, prefix(layer, "attn.qkv"), regions, states.of(layer, "attn.qkv")),
      qk_norm_(layout.config().qk_norm ? std::optional<QkNorm>(std::in_place, layout, layer) : std::nullopt),
      attn_proj_(layout, prefix(layer, "attn.proj"), regions, states.of(layer, "attn.proj")),
      mlp_(make_mlp(layout, layer, regions, states, scope, experts)),
      parallel_(&regions) {}

const LinearStateView& Block::linear_state(std::string_view linear) const {
  if (linear == "attn.qkv") return attn_qkv_.state();
  if (linear == "attn.proj") return attn_proj_.state();
  return mlp_->linear_state(linear);
}

void Block::forward_to_activation(const FlatTensors& weights, Tensor x, const BlockActivations& a,
                                  AttentionCore& attention) const {
  ln_1_.forward(weights, a.ln1, a.ln1_mean, a.ln1_rstd, x);
  attn_qkv_.forward(weights, a.qkv, a.ln1, a.gathered);
  if (qk_norm_) qk_norm_->forward(weights, a.qkv, a.qk);
  attention.forward(a.qkv, a.atty, a.lse);
  const Tensor attn = attn_proj_.forward(weights, a.proj_out, a.atty, a.branch);
  ln_2_.add_forward(weights, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, attn);
  mlp_->forward_to_activation(weights, a);
}

void Block::forward(const FlatTensors& weights, Tensor x, const BlockActivations& a, AttentionCore& attention) const {
  forward_to_activation(weights, x, a, attention);
  k::add_forward(a.res3, a.res2, mlp_->forward_output(weights, a));
}

void Block::backward_input(const FlatTensors& weights, const FlatTensors& grads, Tensor x, const BlockActivations& a,
                           const BlockGradients& d, TrainingAttention& attention, bool weights_now) const {
  if (recompute_ == Recompute::full) forward_to_activation(weights, x, a, attention);
  // MLP branch, from the output's gradient.
  PendingSum dln2 = mlp_->backward_input(weights, grads, a, d, weights_now);
  dln2.done.wait();
  // The residual stream's gradient goes past the branch; the norm's backward adds the branch's.
  copy_unless_same(d.dres2, d.dout);
  ln_2_.backward(weights, grads, d.dres2, dln2.value, a.res2, a.ln2_mean, a.ln2_rstd, *parallel_);
  // Attention branch, from x''s gradient.
  if (recompute_ == Recompute::selective) attention.rerun(a.qkv, a.atty, a.lse);
  const Tensor dattn = attn_proj_.output_gradient(d.dres2, a.gathered);
  attn_proj_.backward_input(weights, d.datty, dattn);
  if (weights_now) attn_proj_.backward_weight(grads, dattn, a.atty);
  attention.backward(d.dqkv, d.datty, a.qkv, a.atty, a.lse);
  if (qk_norm_) qk_norm_->backward(weights, grads, d.dqkv, a.qk, d.dqk_rows);
  PendingSum dln1 = attn_qkv_.backward_input(weights, d.dtmp, d.dqkv, d.dlocal);
  parallel_->sum_copied_head_gradients(d.dqkv);
  if (weights_now) attn_qkv_.backward_weight(grads, d.dqkv, a.ln1, a.gathered);
  dln1.done.wait();
  copy_unless_same(d.din, d.dres2);
  ln_1_.backward(weights, grads, d.din, dln1.value, x, a.ln1_mean, a.ln1_rstd, *parallel_);
}

void Block::backward_weight(const FlatTensors& grads, const BlockActivations& a, const BlockGradients& d) const {
  mlp_->backward_weight(grads, a, d);
  attn_proj_.backward_weight(grads, attn_proj_.output_gradient(d.dres2, a.gathered), a.atty);
  attn_qkv_.backward_weight(grads, d.dqkv, a.ln1, a.gathered);
}

}  // namespace dt
