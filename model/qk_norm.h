// The query and key norms of OLMoE and OLMo 2 (ModelConfig::qk_norm): an RMSNorm over each
// token's query, all heads' columns of attn.qkv's output, and another over its key, after the
// projection and before rotary, with weights attn.q_norm (NH · HS) and attn.k_norm (NKV · HS):
//
//   q = rmsnorm(q) · attn.q_norm,   k = rmsnorm(k) · attn.k_norm    (over NH · HS and NKV · HS)
//
// The norms run on rows of their own: qkv's query and key columns are copied out (the norms'
// inputs, which backward reads), normalized, and copied back over themselves; backward copies
// the gradients out and back the same way. A norm over all heads would need each tensor-parallel
// rank's sums of squares: tensor parallelism refuses the model (model/tensor_shard.h).
#pragma once

#include <array>

#include "core/tensor.h"
#include "model/block_tensors.h"
#include "model/layers.h"
#include "model/parameters.h"

namespace dt {

class QkNorm {
 public:
  // Block `layer`'s attn.q_norm and attn.k_norm of `layout`.
  QkNorm(const ParameterLayout& layout, int layer);

  // Normalizes the queries and keys in qkv (N, QKV) in place, keeping their inputs and statistics
  // in a (model/block_tensors.h).
  void forward(const FlatTensors& weights, Tensor qkv, const QkActivations& a) const;
  // Replaces the normalized queries' and keys' gradients in dqkv (N, QKV) with their inputs', and
  // adds the weights' gradients into grads; `drows` (N, NH · HS) is working space, as a.rows is.
  void backward(const FlatTensors& weights, const FlatTensors& grads, Tensor dqkv, const QkActivations& a,
                Tensor drows) const;

 private:
  // Each norm with where its columns start in qkv, and its input and statistics in a.
  struct Part {
    const Norm* norm;
    int64_t first;
    Tensor in, rstd;
  };
  std::array<Part, 2> parts(const QkActivations& a) const {
    return {{{&q_, 0, a.q_in, a.q_rstd}, {&k_, q_width_, a.k_in, a.k_rstd}}};
  }

  Norm q_, k_;
  int64_t q_width_;  // the queries' columns in qkv, which the keys' follow
};

}  // namespace dt
