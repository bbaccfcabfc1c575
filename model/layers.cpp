#include "model/layers.h"

#include <utility>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/add.h"
#include "kernels/embedding.h"
#include "kernels/grouped_linear.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"

namespace dt {

namespace k = kernels;

namespace {

// `prefix`.bias where the layer has a bias (LinearDeclaration::has_bias), else none.
const ParamInfo* linear_bias(const ParameterLayout& layout, const std::string& prefix) {
  return layout.find_if_any(prefix + ".bias");
}

Tensor view(const FlatTensors& tensors, const ParamInfo* info) { return info ? tensors.stored(*info) : Tensor{}; }

}  // namespace

Norm::Norm(const ParameterLayout& layout, const std::string& prefix)
    : weight_(&layout.find(prefix + ".weight")),
      bias_(layout.config().traits().norm == NormKind::layernorm ? &layout.find(prefix + ".bias") : nullptr),
      eps_(layout.config().norm_eps) {}

void Norm::forward(const FlatTensors& weights, Tensor out, Tensor mean, Tensor rstd, Tensor inp) const {
  if (has_mean())
    k::layernorm_forward(out, mean, rstd, inp, weights.stored(*weight_), weights.stored(*bias_), eps_);
  else
    k::rmsnorm_forward(out, rstd, inp, weights.stored(*weight_), eps_);
}

void Norm::add_forward(const FlatTensors& weights, Tensor res, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                       Tensor b) const {
  if (has_mean())
    k::add_layernorm_forward(res, out, mean, rstd, a, b, weights.stored(*weight_), weights.stored(*bias_), eps_);
  else
    k::add_rmsnorm_forward(res, out, rstd, a, b, weights.stored(*weight_), eps_);
}

void Norm::backward(const FlatTensors& weights, const FlatTensors& grads, Tensor dinp, Tensor dout, Tensor inp,
                    Tensor mean, Tensor rstd, ParallelRegions& regions) const {
  Tensor dweight = grads.stored(*weight_), dbias = view(grads, bias_);
  // With a part of the rows here, this rank's rows' share goes into a zeroed buffer first, is
  // summed over the group, then added: every rank adds the whole rows' gradient, the same bits.
  Buffer partial;
  const int64_t C = dweight.numel();
  if (regions.sequence_parallel()) {
    partial = Buffer(static_cast<size_t>(2 * C) * sizeof(float), MemTag::workspace, dinp.device);
    dweight = partial.view(DType::f32, {C});
    if (has_mean()) dbias = partial.view(DType::f32, {C}, static_cast<size_t>(C) * sizeof(float));
  }
  if (has_mean())
    k::layernorm_backward(dinp, dweight, dbias, dout, inp, weights.stored(*weight_), mean, rstd);
  else
    k::rmsnorm_backward(dinp, dweight, dout, inp, weights.stored(*weight_), rstd);
  if (partial.data() == nullptr) return;
  regions.sum_partial_gradients(partial.view(DType::f32, {has_mean() ? 2 * C : C}));
  const Tensor w = grads.stored(*weight_);
  k::add_forward(w, w, dweight);
  if (has_mean()) {
    const Tensor b = grads.stored(*bias_);
    k::add_forward(b, b, dbias);
  }
}

Tensor LinearProduct::fake_quantized(kernels::WeightFormat format, Tensor values, Buffer& scratch) const {
  scratch = Buffer(values.bytes(), MemTag::workspace, values.device, false);  // every value is written
  const Tensor quantized = scratch.view(values.dtype, values.shape);
  k::RowAmaxCompletion whole_rows;
  if (rows_split_over_ != nullptr)
    whole_rows = [this](std::span<float> amax) {
      rows_split_over_->max_over_group(
          Tensor{.data = amax.data(), .dtype = DType::f32, .shape = {static_cast<int64_t>(amax.size())}, .device = Device::cpu});
    };
  k::fake_quantize(format, values, quantized, whole_rows);
  return quantized;
}

Tensor LinearProduct::product_weight(const FlatTensors& weights, Buffer& scratch) const {
  const Tensor weight = weights.stored(*weight_);
  return qat_ ? fake_quantized(qat_->weights, weight, scratch) : weight;
}

Tensor LinearProduct::product_input(Tensor inp, Buffer& scratch) const {
  if (!qat_ || !qat_->activations) return inp;
  const int64_t cols = inp.shape[inp.shape.ndim() - 1];
  const Tensor rows = inp.reshape({inp.numel() / cols, cols});
  return fake_quantized(kernels::WeightFormat::int8, rows, scratch).reshape(inp.shape);
}

void LinearProduct::forward(const FlatTensors& weights, Tensor out, Tensor inp) const {
  const Tensor bias = adds_bias_ ? weights.stored(*bias_) : Tensor{};
  Buffer weight_scratch, input_scratch;
  const Tensor weight = product_weight(weights, weight_scratch), x = product_input(inp, input_scratch);
  if (float8_) return float8_->forward(out, x, weight, bias);
  k::linear_forward(out, x, weight, bias);
}

void LinearProduct::backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout) const {
  Buffer scratch;
  const Tensor weight = product_weight(weights, scratch);
  if (float8_) return float8_->backward_input(dinp, dout, weight);
  k::linear_backward_input(dinp, dout, weight);
}

void LinearProduct::backward_weight(const FlatTensors& grads, Tensor dout, Tensor inp) const {
  Buffer scratch;
  const Tensor x = product_input(inp, scratch);
  if (!float8_) return k::linear_backward_weight(grads.stored(*weight_), view(grads, bias_), dout, x);
  float8_->backward_weight(grads.stored(*weight_), dout, x);
  if (const Tensor dbias = view(grads, bias_); dbias.defined()) k::linear_backward_bias(dbias, dout);
}

void GroupedLinearProduct::forward(const FlatTensors& weights, Tensor out, Tensor inp, const ExpertRoute& route) const {
  if (float8_) return float8_->forward(out, inp, weights.stored(*weight_), route);
  k::grouped_linear_forward(out, inp, weights.stored(*weight_), route.offsets);
}

void GroupedLinearProduct::backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout,
                                          const ExpertRoute& route) const {
  if (float8_) return float8_->backward_input(dinp, dout, weights.stored(*weight_), route);
  k::grouped_linear_backward_input(dinp, dout, weights.stored(*weight_), route.offsets);
}

void GroupedLinearProduct::backward_weight(const FlatTensors& grads, Tensor dout, Tensor inp,
                                           const ExpertRoute& route) const {
  if (float8_) return float8_->backward_weight(grads.stored(*weight_), dout, inp, route);
  k::grouped_linear_backward_weight(grads.stored(*weight_), dout, inp, route.offsets);
}

std::optional<Float8Linear> float8_products(const LinearStateView& state, LinearStyle style) {
  if (state.float8() == nullptr) return std::nullopt;
  return Float8Linear(*state.float8(), style, state);
}

ColumnParallelLinear::ColumnParallelLinear(const ParameterLayout& layout, const std::string& prefix,
                                           ParallelRegions& regions, LinearStateView state)
    : product_(&layout.find(prefix + ".weight"), linear_bias(layout, prefix), linear_bias(layout, prefix) != nullptr,
               float8_products(state, LinearStyle::column), state.qat()),
      regions_(&regions),
      state_(std::move(state)) {}

const ParamInfo& output_projection_weight(const ParameterLayout& layout) {
  return layout.find(layout.config().tied_embeddings ? "wte" : "lm_head");
}

ColumnParallelLinear ColumnParallelLinear::output_projection(const ParameterLayout& layout, ParallelRegions& regions,
                                                             std::optional<QatRecipe> qat) {
  const bool tied = layout.config().tied_embeddings;
  return {LinearProduct(&output_projection_weight(layout), nullptr, false, std::nullopt, tied ? std::nullopt : qat),
          regions};
}

void ColumnParallelLinear::forward(const FlatTensors& weights, Tensor out, Tensor x, Tensor whole) const {
  product_.forward(weights, out, regions_->column_input(x, whole));
}

PendingSum ColumnParallelLinear::backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout,
                                                Tensor local) const {
  product_.backward_input(weights, dinp, dout);
  return regions_->column_input_gradient(dinp, local);
}

void ColumnParallelLinear::backward_weight(const FlatTensors& grads, Tensor dout, Tensor x, Tensor whole) const {
  product_.backward_weight(grads, dout, regions_->column_input(x, whole));
}

RowParallelLinear::RowParallelLinear(const ParameterLayout& layout, const std::string& prefix,
                                     ParallelRegions& regions, LinearStateView state)
    : RowParallelLinear(&layout.find(prefix + ".weight"), linear_bias(layout, prefix), regions, std::move(state)) {}

RowParallelLinear::RowParallelLinear(const ParamInfo* weight, const ParamInfo* bias, ParallelRegions& regions,
                                     LinearStateView state)
    : product_(weight, bias, bias != nullptr && bias->slice.pieces.front().owned,
               float8_products(state, LinearStyle::row), state.qat(), &regions),
      regions_(&regions),
      state_(std::move(state)) {}

Tensor RowParallelLinear::forward(const FlatTensors& weights, Tensor partial, Tensor x, Tensor local) const {
  product_.forward(weights, partial, x);
  return regions_->row_output(partial, local);
}

Tensor RowParallelLinear::output_gradient(Tensor dy, Tensor whole) const {
  return regions_->row_output_gradient(dy, whole);
}

void RowParallelLinear::backward_input(const FlatTensors& weights, Tensor dinp, Tensor dout) const {
  product_.backward_input(weights, dinp, dout);
}

void RowParallelLinear::backward_weight(const FlatTensors& grads, Tensor dout, Tensor inp) const {
  product_.backward_weight(grads, dout, inp);
}

Embedding::Embedding(const ParameterLayout& layout)
    : wte_(&layout.find("wte")),
      wpe_(layout.config().traits().positions == PositionKind::learned ? &layout.find("wpe") : nullptr),
      first_id_(layout.dims().vocab.begin),
      adds_positions_(wpe_ != nullptr && wpe_->slice.pieces.front().owned) {}

void Embedding::forward(const FlatTensors& weights, Tensor x, Tensor tokens, int64_t first_position) const {
  forward(weights, x, tokens, {{first_position, tokens.dim(1)}});
}

void Embedding::forward(const FlatTensors& weights, Tensor x, Tensor tokens,
                        const std::vector<AttentionScope::Positions>& positions) const {
  const int64_t B = tokens.dim(0), T = tokens.dim(1), C = x.dim(1);
  // The unpadded rows: the ids of the padding rows are another rank's.
  k::embedding_forward(x, tokens.reshape({B * T}), weights.unpadded(*wte_), first_id_);
  if (!adds_positions_) return;
  const Tensor table = weights.stored(*wpe_);
  if (positions.size() == 1) return k::position_embedding_forward(x.reshape({B, T, C}), table.slice_rows(positions[0].first, T));
  // Several runs: their rows of the table gathered, in the tokens' order.
  const Buffer gathered(static_cast<size_t>(T * C) * dtype_size(table.dtype), MemTag::workspace, table.device, false);
  const Tensor rows = gathered.view(table.dtype, {T, C});
  int64_t at = 0;
  for (const AttentionScope::Positions& run : positions) {
    copy_bytes(rows.slice_rows(at, run.count).data, table.device, table.slice_rows(run.first, run.count).data,
               table.device, static_cast<size_t>(run.count * C) * dtype_size(table.dtype));
    at += run.count;
  }
  k::position_embedding_forward(x.reshape({B, T, C}), rows);
}

void Embedding::backward(const FlatTensors& grads, Tensor tokens, Tensor dx,
                         const std::vector<AttentionScope::Positions>& positions) const {
  const int64_t B = tokens.dim(0), T = tokens.dim(1), C = dx.dim(1);
  if (wpe_ != nullptr) {
    const Tensor table = grads.stored(*wpe_);
    if (positions.size() <= 1) {
      k::position_embedding_backward(table.slice_rows(positions.empty() ? 0 : positions[0].first, T),
                                     dx.reshape({B, T, C}));
    } else {
      // Several runs: the gradient of the gathered rows, added into each run's rows.
      const Buffer gathered(static_cast<size_t>(T * C) * dtype_size(table.dtype), MemTag::workspace, table.device,
                            true);
      const Tensor rows = gathered.view(table.dtype, {T, C});
      k::position_embedding_backward(rows, dx.reshape({B, T, C}));
      int64_t at = 0;
      for (const AttentionScope::Positions& run : positions) {
        k::accumulate(table.slice_rows(run.first, run.count), rows.slice_rows(at, run.count));
        at += run.count;
      }
    }
  }
  k::embedding_backward(grads.unpadded(*wte_), tokens.reshape({B * T}), dx, first_id_);
}

}  // namespace dt
