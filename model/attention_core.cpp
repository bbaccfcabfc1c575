#include "model/attention_core.h"

#include "kernels/attention.h"
#include "kernels/rope.h"

namespace dt {

namespace k = kernels;

std::unique_ptr<TrainingAttention> AttentionScope::core(kernels::AttentionHeads heads, int64_t B, int64_t T,
                                                        Tensor rope_cos, Tensor rope_sin) const {
  return std::make_unique<CausalSelfAttention>(heads, B, T, rope_cos, rope_sin);
}

const AttentionScope& AttentionScope::local() {
  static const AttentionScope scope;
  return scope;
}

CausalSelfAttention::CausalSelfAttention(kernels::AttentionHeads heads, int64_t batch, int64_t seq_len,
                                         Tensor rope_cos, Tensor rope_sin)
    : heads_(heads),
      B_(batch),
      T_(seq_len),
      cos_(rope_cos.defined() ? rope_cos.slice_rows(0, seq_len) : Tensor{}),
      sin_(rope_sin.defined() ? rope_sin.slice_rows(0, seq_len) : Tensor{}) {}

void CausalSelfAttention::forward(Tensor qkv, Tensor atty, Tensor lse) {
  // Rotated in place: attention and its backward need only the rotated q and k.
  if (cos_.defined())
    k::rope_forward(qkv.reshape({B_, T_, qkv.dim(1)}), cos_, sin_, heads_.n_head, heads_.n_kv_head);
  rerun(qkv, atty, lse);
}

void CausalSelfAttention::rerun(Tensor qkv, Tensor atty, Tensor lse) {
  k::attention_forward(atty.reshape({B_, T_, atty.dim(1)}), lse.reshape({B_, heads_.n_head, T_}),
                       qkv.reshape({B_, T_, qkv.dim(1)}), heads_);
}

void CausalSelfAttention::backward(Tensor dqkv, Tensor datty, Tensor qkv, Tensor atty, Tensor lse) {
  const int64_t QKV = qkv.dim(1), C = atty.dim(1);
  k::attention_backward(dqkv.reshape({B_, T_, QKV}), datty.reshape({B_, T_, C}), qkv.reshape({B_, T_, QKV}),
                        atty.reshape({B_, T_, C}), lse.reshape({B_, heads_.n_head, T_}), heads_);
  if (cos_.defined()) k::rope_backward(dqkv.reshape({B_, T_, QKV}), cos_, sin_, heads_.n_head, heads_.n_kv_head);
}

}  // namespace dt
