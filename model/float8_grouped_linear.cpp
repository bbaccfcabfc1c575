#include "model/float8_grouped_linear.h"

#include <algorithm>
#include <optional>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/float8.h"
#include "kernels/float8_linear.h"
#include "model/tensor_shard.h"

namespace dt {

namespace k = kernels;
using k::float8_math::Format;

namespace {

DType dtype_of(Format f) { return f == Format::e4m3 ? DType::f8e4m3 : DType::f8e5m2; }

Buffer workspace(int64_t bytes, Device device) {
  return Buffer(static_cast<size_t>(std::max<int64_t>(bytes, 1)), MemTag::workspace, device, /*zero=*/false);
}

// An f32 workspace vector of `values` on `device`.
Buffer on_device(const std::vector<float>& values, Device device) {
  Buffer b = workspace(static_cast<int64_t>(values.size() * sizeof(float)), device);
  copy_bytes(b.data(), device, values.data(), Device::cpu, values.size() * sizeof(float));
  return b;
}

std::vector<float> on_host(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  copy_bytes(v.data(), Device::cpu, t.data, t.device, t.bytes());
  return v;
}

Tensor expert(const Tensor& w, int64_t x) { return w.slice_rows(x, 1).reshape({w.dim(1), w.dim(2)}); }

}  // namespace

// An operand's bytes and scales in workspace, and the pieces a product reads: a rows operand's
// segments (blockwise: each expert's rows), a weight's experts.
struct Float8GroupedLinear::Quantized {
  struct Piece {
    int64_t expert, first, rows;
    k::Float8Tensor q;
  };
  Buffer data, scale_inv;
  std::vector<Piece> pieces;
};

Float8GroupedLinear::Float8GroupedLinear(const Float8Training& fp8, LinearStateView state, int64_t experts,
                                         ExpertShard shard, Communicator* ep)
    : fp8_(&fp8),
      state_(std::move(state)),
      experts_(experts),
      first_expert_(even_part(experts, shard.size, shard.rank).begin),
      ep_(ep) {}

Float8GroupedLinear::Quantized Float8GroupedLinear::quantize_rows(Operand operand, Tensor x,
                                                                    const ExpertRoute& route) const {
  const Float8Recipe& recipe = fp8_->recipe;
  const Format format = operand == gradient ? recipe.gradient_format() : recipe.input_format();
  const int64_t X = static_cast<int64_t>(route.offsets.size()) - 1, R = static_cast<int64_t>(route.sent.size());
  DT_CHECK(static_cast<int64_t>(route.received.size()) == R * X && x.dim(0) == route.rows(), "a route of ", X,
           " experts and ", R, " ranks for ", x.describe());
  Quantized out{workspace(x.numel(), x.device), {}, {}};
  const Tensor data = out.data.view(dtype_of(format), x.shape);
  if (recipe.scaling == Float8Scaling::blockwise) {
    const k::Float8Tiles tiles{1, recipe.block};
    const Shape scales = k::float8_scale_shape(x.shape, tiles);
    out.scale_inv = workspace(scales.numel() * int64_t{sizeof(float)}, x.device);
    const Tensor scale_inv = out.scale_inv.view(DType::f32, scales);
    k::float8_quantize_tiles({data, scale_inv, tiles}, x);
    for (int64_t e = 0; e < X; ++e)
      if (const int64_t first = route.offsets[e], n = route.offsets[e + 1] - first; n > 0)
        out.pieces.push_back({e, first, n, {data.slice_rows(first, n), scale_inv.slice_rows(first, n), tiles}});
    return out;
  }
  // Segment s = e · R + q: expert e's rows from rank q, each quantized whole with its own scale.
  const int64_t S = X * R;
  out.scale_inv = workspace(S * int64_t{sizeof(float)}, x.device);
  std::vector<Quantized::Piece> segments;
  for (int64_t e = 0, first = 0; e < X; ++e)
    for (int64_t q = 0; q < R; ++q) {
      const int64_t n = route.received[static_cast<size_t>(q * X + e)], s = e * R + q;
      segments.push_back({e, first, n,
                          {data.slice_rows(first, n), out.scale_inv.view(DType::f32, {1}, s * sizeof(float)),
                           k::Float8Tiles::whole()}});
      first += n;
    }
  if (recipe.scaling == Float8Scaling::delayed) {
    const Tensor amax = state_.get("fp8_amax"), scale = state_.get("fp8_scale");
    for (const Quantized::Piece& p : segments) {
      if (p.rows == 0) continue;
      const int64_t at = 3 * (first_expert_ + p.expert) + operand;
      k::float8_quantize(p.q, x.slice_rows(p.first, p.rows), scale.slice_rows(at, 1), amax.slice_rows(at, 1));
      out.pieces.push_back(p);
    }
    return out;
  }
  // Tensorwise: [amaxes (S), scales (S)], zeroed on the device; a segment without rows (or with
  // only zeros) gets scale 1.
  const Buffer values(static_cast<size_t>(2 * S) * sizeof(float), MemTag::workspace, x.device);
  const Tensor amax = values.view(DType::f32, {S}), scale = values.view(DType::f32, {S}, S * sizeof(float));
  for (size_t s = 0; s < segments.size(); ++s)
    if (const Quantized::Piece& p = segments[s]; p.rows > 0)
      k::float8_amax(amax.slice_rows(static_cast<int64_t>(s), 1), x.slice_rows(p.first, p.rows));
  if (fp8_->replicas != nullptr) agree_on_micro_batches(amax, route);
  k::float8_scale(scale, amax, format, recipe.margin, recipe.pow2_scales, k::Float8Fallback::one);
  for (size_t s = 0; s < segments.size(); ++s) {
    const Quantized::Piece& p = segments[s];
    if (p.rows == 0) continue;
    k::float8_quantize(p.q, x.slice_rows(p.first, p.rows), scale.slice_rows(static_cast<int64_t>(s), 1));
    out.pieces.push_back(p);
  }
  return out;
}

void Float8GroupedLinear::agree_on_micro_batches(Tensor amax, const ExpertRoute& route) const {
  Communicator& replicas = *fp8_->replicas;
  const int64_t X = static_cast<int64_t>(route.offsets.size()) - 1, R = static_cast<int64_t>(route.sent.size());
  const int64_t P = replicas.size(), E = experts_, cp = fp8_->cp != nullptr ? fp8_->cp->size() : 1;
  // Places are dp-major over dp × cp (parallel/parallel_dims.h): the ep group's rank q is place
  // base + q, and place p holds part p % cp of micro-batch p / cp.
  const int64_t base = replicas.rank() - (ep_ != nullptr ? ep_->rank() : 0);
  std::vector<float> mine = on_host(amax), table(static_cast<size_t>(P * E), 0.0f);
  for (int64_t e = 0; e < X; ++e)
    for (int64_t q = 0; q < R; ++q) table[static_cast<size_t>((base + q) * E + first_expert_ + e)] = mine[e * R + q];
  const Buffer shared = on_device(table, amax.device);
  replicas.all_reduce(shared.view(DType::f32, {P * E}), ReduceOp::max).wait();
  table = on_host(shared.view(DType::f32, {P * E}));
  for (int64_t e = 0; e < X; ++e)
    for (int64_t q = 0; q < R; ++q) {
      const int64_t micro_batch = (base + q) / cp;
      float m = 0;
      for (int64_t c = 0; c < cp; ++c)
        m = k::float8_math::amax_of(m, table[static_cast<size_t>((micro_batch * cp + c) * E + first_expert_ + e)]);
      mine[static_cast<size_t>(e * R + q)] = m;
    }
  copy_bytes(amax.data, amax.device, mine.data(), Device::cpu, amax.bytes());
}

Float8GroupedLinear::Quantized Float8GroupedLinear::quantize_weights(Tensor w) const {
  const Float8Recipe& recipe = fp8_->recipe;
  const Format format = recipe.input_format();
  const int64_t X = w.dim(0), OC = w.dim(1), C = w.dim(2);
  Quantized out{workspace(w.numel(), w.device), {}, {}};
  const Tensor data = out.data.view(dtype_of(format), w.shape);
  if (recipe.scaling == Float8Scaling::blockwise) {
    const int64_t B = recipe.block;
    const k::Float8Tiles tiles{B, B};
    const Shape scales = k::float8_scale_shape({X * OC, C}, tiles);
    out.scale_inv = workspace(scales.numel() * int64_t{sizeof(float)}, w.device);
    const Tensor scale_inv = out.scale_inv.view(DType::f32, scales);
    k::float8_quantize_tiles({data.reshape({X * OC, C}), scale_inv, tiles}, w.reshape({X * OC, C}));
    for (int64_t e = 0; e < X; ++e)
      out.pieces.push_back({e, e * OC, OC, {expert(data, e), scale_inv.slice_rows(e * OC / B, OC / B), tiles}});
    return out;
  }
  out.scale_inv = workspace(X * int64_t{sizeof(float)}, w.device);
  const Tensor scale_inv = out.scale_inv.view(DType::f32, {X});
  std::optional<Buffer> values;
  Tensor scale;
  if (recipe.scaling == Float8Scaling::delayed) {
    scale = state_.get("fp8_scale");
  } else {
    values.emplace(static_cast<size_t>(2 * X) * sizeof(float), MemTag::workspace, w.device);
    scale = values->view(DType::f32, {X}, X * sizeof(float));
    const Tensor amax = values->view(DType::f32, {X});
    for (int64_t e = 0; e < X; ++e) k::float8_amax(amax.slice_rows(e, 1), expert(w, e));
    k::float8_scale(scale, amax, format, recipe.margin, recipe.pow2_scales, k::Float8Fallback::one);
  }
  for (int64_t e = 0; e < X; ++e) {
    const bool delayed = recipe.scaling == Float8Scaling::delayed;
    const int64_t at = delayed ? 3 * (first_expert_ + e) + weight : e;
    const k::Float8Tensor q{expert(data, e), scale_inv.slice_rows(e, 1), k::Float8Tiles::whole()};
    k::float8_quantize(q, expert(w, e), scale.slice_rows(at, 1),
                       delayed ? state_.get("fp8_amax").slice_rows(at, 1) : Tensor{});
    out.pieces.push_back({e, e * OC, OC, q});
  }
  return out;
}

void Float8GroupedLinear::forward(Tensor out, Tensor inp, Tensor w, const ExpertRoute& route) const {
  const Quantized x = quantize_rows(input, inp, route), wq = quantize_weights(w);
  for (const Quantized::Piece& p : x.pieces)
    k::float8_linear_forward(out.slice_rows(p.first, p.rows), p.q, wq.pieces[p.expert].q, Tensor{});
}

void Float8GroupedLinear::backward_input(Tensor dinp, Tensor dout, Tensor w, const ExpertRoute& route) const {
  const Quantized dy = quantize_rows(gradient, dout, route), wq = quantize_weights(w);
  for (const Quantized::Piece& p : dy.pieces)
    k::float8_linear_backward_input(dinp.slice_rows(p.first, p.rows), p.q, wq.pieces[p.expert].q);
}

void Float8GroupedLinear::backward_weight(Tensor dweight, Tensor dout, Tensor inp, const ExpertRoute& route) const {
  const Quantized dy = quantize_rows(gradient, dout, route), x = quantize_rows(input, inp, route);
  for (size_t i = 0; i < x.pieces.size(); ++i)
    k::float8_linear_backward_weight(expert(dweight, x.pieces[i].expert), dy.pieces[i].q, x.pieces[i].q);
}

}  // namespace dt
