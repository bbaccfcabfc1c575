// The parameterised layers of the model — the norm and the linear layer a block is made of, and
// the embeddings — each holding
// where its parameters are in the layout (resolved by name once, when the model is built) so that
// a pass finds them without a name lookup — the way llm.c names qkvw and attprojw. The same
// layer reads its weights from the weights forward reads and adds into the gradients, which are
// flat buffers of one layout (model/parameters.h).
//
//   Norm:    LayerNorm (weight and bias) or RMSNorm (weight), as the family's traits say, with
//            the model's eps.
//   ColumnParallelLinear, RowParallelLinear: out = inp @ weight^T + bias (the bias where the
//            family has biases), by their tensor-parallel style (model/block_declaration.h).
//   Embedding: x = wte[tokens], + wpe[positions] with learned positions.
//
// Under tensor parallelism (model/tensor_shard.h) each layer computes with this rank's slice of
// its parameters: a column-parallel layer its rows of the output, a row-parallel one (the
// weight's columns split) its part of the sum; the Embedding looks up this rank's vocabulary
// rows (zeros for the others' ids), and only the position table's owner adds the positions.
// The linear layers communicate through the ParallelRegions they are given
// (model/parallel_regions.h); the embedding's sum is the caller's. Every rank computes every
// gradient it holds.
// A linear layer of a block may hold its per-linear state (model/linear_state.h: FP8's scaling
// state, a quantizer's), the same on every rank that holds a piece of the layer, and run its
// products in FP8 where its state view says FP8 training quantizes it (model/float8_linear.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"
#include "model/qat_recipe.h"
#include "model/attention_core.h"
#include "model/config.h"
#include "model/expert_exchange.h"
#include "model/float8_grouped_linear.h"
#include "model/float8_linear.h"
#include "model/linear_state.h"
#include "model/parallel_regions.h"
#include "model/parameters.h"

namespace dt {

class Norm {
 public:
  // The norm whose parameters are `prefix`.weight (and .bias for LayerNorm): "h.3.ln_1", "ln_f".
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
  const ParamInfo* bias_;  // LayerNorm's
  float eps_;
};

// The product both styles of linear layer compute on this rank's slice of the weight:
// out = inp @ weight^T (+ bias where `adds_bias`), in the storage precision, or in FP8 where
// `float8` is given (model/float8_linear.h). Under quantization-aware training (`qat`) forward
// and backward_input read the weight's values in the recipe's format (kernels/weight_quant.h),
// made from the weight each time; backward_weight's gradient goes to the weight as it is, the
// straight-through estimator. With the recipe's activations, forward and backward_weight read
// the input's values in int8 per row, and backward_input's gradient passes to the input as it
// is. A row-parallel layer's rank holds a slice of each row of its weight and its input
// (`rows_split_over` its group), whose int8 scale is the whole row's.
class LinearProduct {
 public:
  LinearProduct(const ParamInfo* weight, const ParamInfo* bias, bool adds_bias,
                std::optional<Float8Linear> float8 = std::nullopt,
                std::optional<QatRecipe> qat = std::nullopt, ParallelRegions* rows_split_over = nullptr)
      : weight_(weight),
        bias_(bias),
        adds_bias_(adds_bias),
        float8_(std::move(float8)),
        qat_(qat),
        rows_split_over_(rows_split_over) {}

  void forward(const FlatTensors& weights, Tensor out, Tensor inp) const;
  // dinp = dout @ weight (set, not accumulated).
  void backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout) const;
  // The weight's (and bias's) gradient += from dout and the forward's input.
  void backward_weight(const FlatTensors& grads, Tensor dout, Tensor inp) const;

 private:
  // The weight the products read: as stored, or under QAT its values in the format, in `scratch`.
  Tensor product_weight(const FlatTensors& weights, Buffer& scratch) const;
  // The input they read: as it is, or under QAT with activations its values in int8 per row.
  Tensor product_input(Tensor inp, Buffer& scratch) const;
  // `values` (rows, cols) fake-quantized in `format` into `scratch`.
  Tensor fake_quantized(kernels::WeightFormat format, Tensor values, Buffer& scratch) const;

  const ParamInfo* weight_;
  const ParamInfo* bias_;  // where the family has biases
  bool adds_bias_;
  std::optional<Float8Linear> float8_;
  std::optional<QatRecipe> qat_;
  ParallelRegions* rows_split_over_;
};

// The FP8 products of a layer of `style` where its state view says FP8 quantizes it; none
// otherwise.
std::optional<Float8Linear> float8_products(const LinearStateView& state, LinearStyle style);

// The experts' grouped linear layer's products (kernels/grouped_linear.h) over the rows `route`
// lays out expert by expert, in FP8 where `float8` is given (model/float8_grouped_linear.h).
class GroupedLinearProduct {
 public:
  explicit GroupedLinearProduct(const ParamInfo* weight, std::optional<Float8GroupedLinear> float8 = std::nullopt)
      : weight_(weight), float8_(std::move(float8)) {}

  void forward(const FlatTensors& weights, Tensor out, Tensor inp, const ExpertRoute& route) const;
  // dinp = dout @ weight for each expert's rows (set).
  void backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout, const ExpertRoute& route) const;
  // The weight's gradient += from dout and the forward's input.
  void backward_weight(const FlatTensors& grads, Tensor dout, Tensor inp, const ExpertRoute& route) const;

 private:
  const ParamInfo* weight_;
  std::optional<Float8GroupedLinear> float8_;
};

// The output projection's weight: lm_head, or wte when the embeddings are tied.
const ParamInfo& output_projection_weight(const ParameterLayout& layout);

// A column-parallel linear layer (Megatron's ColumnParallelLinear: attention's qkv, the MLP's
// first projection, the output projection): its input comes through f — identity forward, the
// input gradient's sum over the group backward, or under sequence parallelism the gather of
// every rank's rows into `whole` and the reduce-scatter of the gradient into `local`; each rank
// computes its rows of the output, and adds its rows of the bias.
class ColumnParallelLinear {
 public:
  // The layer whose parameters are `prefix`.weight (and .bias): "h.3.attn.qkv". Communicates
  // through `regions` (which must outlive it); `state`: its per-linear state (views into a
  // LinearStates that must outlive it), none by default.
  ColumnParallelLinear(const ParameterLayout& layout, const std::string& prefix, ParallelRegions& regions,
                       LinearStateView state = {});
  // The output projection, without bias: lm_head, or wte when the embeddings are tied; `qat`
  // applies to lm_head (a linear layer), not to wte (an embedding).
  static ColumnParallelLinear output_projection(const ParameterLayout& layout, ParallelRegions& regions,
                                                std::optional<QatRecipe> qat = std::nullopt);

  // out (N, this rank's output rows) from x, this rank's rows of the input.
  void forward(const FlatTensors& weights, Tensor out, Tensor x, Tensor whole) const;
  // dinp (N, C) = dout @ weight (set), then its sum over the group started: the pending sum,
  // into `local` under sequence parallelism. Work that does not need it goes before the wait.
  PendingSum backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout, Tensor local) const;
  // The weight's (and bias's) gradient += from dout and the forward's input x (gathered again
  // into `whole` under sequence parallelism).
  void backward_weight(const FlatTensors& grads, Tensor dout, Tensor x, Tensor whole) const;
  const LinearStateView& state() const { return state_; }

 private:
  ColumnParallelLinear(LinearProduct product, ParallelRegions& regions) : product_(product), regions_(&regions) {}
  LinearProduct product_;
  ParallelRegions* regions_;
  LinearStateView state_;
};

// A row-parallel linear layer (Megatron's RowParallelLinear: each branch's output projection):
// each rank computes a partial sum of the whole output from its columns of the input, and the
// output goes through g — the sum over the group forward (a reduce-scatter into this rank's
// rows under sequence parallelism), identity backward (a gather). Only the bias's owner adds
// the bias, so that the sum adds it once.
class RowParallelLinear {
 public:
  // As ColumnParallelLinear's.
  RowParallelLinear(const ParameterLayout& layout, const std::string& prefix, ParallelRegions& regions,
                    LinearStateView state = {});

  // This rank's rows of the complete output, from its partial output `partial` (N, C) of x:
  // `partial` itself, or `local` under sequence parallelism.
  Tensor forward(const FlatTensors& weights, Tensor partial, Tensor x, Tensor local) const;
  // The gradient of the whole output (N, C) from this rank's rows dy (into `whole` under sequence
  // parallelism): what backward_input and backward_weight read.
  Tensor output_gradient(Tensor dy, Tensor whole) const;
  // dinp = dout @ weight (set), dout the whole output's gradient.
  void backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout) const;
  // The weight's (and bias's) gradient += from dout (the whole output's) and the forward's input.
  void backward_weight(const FlatTensors& grads, Tensor dout, Tensor inp) const;
  const LinearStateView& state() const { return state_; }

 private:
  RowParallelLinear(const ParamInfo* weight, const ParamInfo* bias, ParallelRegions& regions, LinearStateView state);
  LinearProduct product_;
  ParallelRegions* regions_;
  LinearStateView state_;
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
  const ParamInfo* wpe_;  // learned positions only
  int64_t first_id_;      // of the vocabulary rows wte holds
  bool adds_positions_;   // the position table is owned here
};

}  // namespace dt
