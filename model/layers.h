// The parameterised layers of the model — the norm and the linear layer a block is made of, and
// the embeddings — each holding
// where its parameters are in the layout (resolved by name once, when the model is built) so that
// a pass finds them without a name lookup — the way llm.c names qkvw and attprojw. The same
// layer reads its weights from the weights forward reads and adds into the gradients, which are
// flat buffers of one layout (model/parameters.h).
//
//   Norm:    gpt2's LayerNorm (weight and bias) or llama's RMSNorm (weight), with the model's eps.
//   Linear:  out = inp @ weight^T + bias; the bias in gpt2 only.
//   Embedding: x = wte[tokens], + wpe[positions] for gpt2.
//
// Under tensor parallelism (model/tensor_shard.h) each layer computes with this rank's slice of
// its parameters: a column-parallel Linear its rows of the output, a row-parallel one (the
// weight's columns split) its part of the sum, to which only the bias's owner adds the bias; the
// Embedding looks up this rank's vocabulary rows (zeros for the others' ids), and only the
// position table's owner adds the positions. The sums over the group are the caller's
// (model/parallel_regions.h). Every rank computes every gradient it holds.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/attention_core.h"
#include "model/config.h"
#include "model/parallel_regions.h"
#include "model/parameters.h"

namespace dt {

class Norm {
 public:
  // The norm whose parameters are `prefix`.weight (and .bias for gpt2): "h.3.ln_1", "ln_f".
  Norm(const ParameterLayout& layout, const std::string& prefix);

  // Sets out (N, C) and rstd (N), and mean (N) for LayerNorm (RMSNorm keeps none: mean may be
  // undefined).
  void forward(const FlatTensors& weights, Tensor out, Tensor mean, Tensor rstd, Tensor inp) const;
  // The residual add fused with this norm: res = a + b, then out, mean and rstd of res, with the
  // bits of the two ops one after the other (kernels/layernorm.h). res may be a or b.
  void add_forward(const FlatTensors& weights, Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                   Tensor b) const;
  // dinp += the input's gradient; the parameters' gradients += theirs, summed over the group
  // where the rows are a part of the micro-batch's (sequence parallelism: `regions`).
  void backward(const FlatTensors& weights, const FlatTensors& grads, Tensor dinp, Tensor dout, Tensor inp,
                Tensor mean, Tensor rstd, ParallelRegions& regions) const;
  // Whether the norm keeps a per-row mean (LayerNorm).
  bool has_mean() const { return bias_ != nullptr; }

 private:
  const ParamInfo* weight_;
  const ParamInfo* bias_;  // gpt2 only
  float eps_;
};

class Linear {
 public:
  // The layer whose parameters are `prefix`.weight (and .bias for gpt2): "h.3.attn.qkv".
  Linear(const ParameterLayout& layout, const std::string& prefix);
  // The output projection, without bias: lm_head, or wte when the embeddings are tied.
  static Linear output_projection(const ParameterLayout& layout);

  void forward(const FlatTensors& weights, Tensor out, Tensor inp) const;
  // dinp = dout @ weight (set, not accumulated).
  void backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout) const;
  // The weight's (and bias's) gradient += from dout and the forward's input.
  void backward_weight(const FlatTensors& grads, Tensor dout, Tensor inp) const;
  const ParamInfo& weight() const { return *weight_; }

 private:
  Linear(const ParamInfo* weight, const ParamInfo* bias);
  const ParamInfo* weight_;
  const ParamInfo* bias_;  // gpt2 only
  bool adds_bias_;         // forward adds the bias: it has one, and the output is not a partial sum or the bias is owned
};

class Embedding {
 public:
  explicit Embedding(const ParameterLayout& layout);

  // x (B*T, C) from tokens (B, T) i32, the sequences starting at position first_position.
  void forward(const FlatTensors& weights, Tensor x, Tensor tokens, int64_t first_position = 0) const;
  // The same for tokens at `positions` of their sequences, run by run (a context-parallel rank's
  // chunks; model/attention_core.h).
  void forward(const FlatTensors& weights, Tensor x, Tensor tokens,
               const std::vector<AttentionScope::Positions>& positions) const;
  // The tables' gradients += from dx (B*T, C), for tokens at `positions` (by default 0..T-1).
  void backward(const FlatTensors& grads, Tensor tokens, Tensor dx,
                const std::vector<AttentionScope::Positions>& positions = {}) const;
  const ParamInfo& token_table() const { return *wte_; }

 private:
  const ParamInfo* wte_;
  const ParamInfo* wpe_;  // gpt2 only
  int64_t first_id_;      // of the vocabulary rows wte holds
  bool adds_positions_;   // the position table is owned here
};

}  // namespace dt
