#include "model/float8_linear.h"

#include <algorithm>
#include <numeric>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/float8.h"
#include "kernels/float8_linear.h"
#include "model/transformer.h"

namespace dt {

namespace k = kernels;
using k::float8_math::Format;

namespace {

DType dtype_of(Format f) { return f == Format::e4m3 ? DType::f8e4m3 : DType::f8e5m2; }

std::vector<Communicator*> present(const std::vector<Communicator*>& groups) {
  std::vector<Communicator*> out;
  for (Communicator* g : groups)
    if (g != nullptr) out.push_back(g);
  return out;
}

}  // namespace

// An operand's bytes and scales, in workspace for one product.
struct Float8Linear::Quantized {
  Buffer data, scale_inv;
  k::Float8Tensor q;
};

Float8Linear::Float8Linear(const Float8Training& fp8, LinearStyle style, LinearStateView state)
    : fp8_(&fp8), state_(std::move(state)) {
  const bool column = style == LinearStyle::column;
  holders_[input] = column ? present({fp8.cp}) : present({fp8.tp, fp8.cp});
  holders_[weight] = present({fp8.tp});
  holders_[gradient] = column ? present({fp8.tp, fp8.cp}) : present({fp8.cp});
}

Float8Linear::Quantized Float8Linear::quantize(Operand operand, Tensor x, Along along) const {
  const Float8Recipe& recipe = fp8_->recipe;
  const Format format = operand == gradient ? recipe.gradient_format() : recipe.input_format();
  const int64_t B = recipe.block;
  const k::Float8Tiles tiles = recipe.scaling != Float8Scaling::blockwise ? k::Float8Tiles::whole()
                               : along == Along::rows                     ? k::Float8Tiles{1, B}
                               : along == Along::columns                  ? k::Float8Tiles{B, 1}
                                                                          : k::Float8Tiles{B, B};
  const Shape scales = k::float8_scale_shape(x.shape, tiles);
  Quantized out{Buffer(static_cast<size_t>(x.numel()), MemTag::workspace, x.device, /*zero=*/false),
                Buffer(static_cast<size_t>(scales.numel()) * sizeof(float), MemTag::workspace, x.device, false), {}};
  out.q = {out.data.view(dtype_of(format), x.shape), out.scale_inv.view(DType::f32, scales), tiles};
  switch (recipe.scaling) {
    case Float8Scaling::blockwise:
      k::float8_quantize_tiles(out.q, x);
      break;
    case Float8Scaling::tensorwise: {
      // [amax, scale], zeroed on the device (no host copy, which would wait for the stream): the
      // amax over every holder, the scale from it (1 where it has none).
      const Buffer values(2 * sizeof(float), MemTag::workspace, x.device);
      const Tensor amax = values.view(DType::f32, {1}), scale = values.view(DType::f32, {1}, sizeof(float));
      k::float8_amax(amax, x);
      for (Communicator* group : holders_[operand]) group->all_reduce(amax, ReduceOp::max).wait();
      k::float8_scale(scale, amax, format, recipe.margin, recipe.pow2_scales, k::Float8Fallback::one);
      k::float8_quantize(out.q, x, scale);
      break;
    }
    case Float8Scaling::delayed: {
      const Tensor amax = state_.get("fp8_amax"), scale = state_.get("fp8_scale");
      k::float8_quantize(out.q, x, scale.slice_rows(operand, 1), amax.slice_rows(operand, 1));
      break;
    }
    case Float8Scaling::none:
      DT_CHECK(false, "FP8 products without an FP8 recipe");
  }
  return out;
}

void Float8Linear::forward(Tensor out, Tensor inp, Tensor w, Tensor bias) const {
  const Quantized x = quantize(input, inp, Along::rows), wq = quantize(weight, w, Along::square);
  k::float8_linear_forward(out, x.q, wq.q, bias);
}

void Float8Linear::backward_input(Tensor dinp, Tensor dout, Tensor w) const {
  const Quantized dy = quantize(gradient, dout, Along::rows), wq = quantize(weight, w, Along::square);
  k::float8_linear_backward_input(dinp, dy.q, wq.q);
}

void Float8Linear::backward_weight(Tensor dweight, Tensor dout, Tensor inp) const {
  const Quantized dy = quantize(gradient, dout, Along::columns), x = quantize(input, inp, Along::columns);
  k::float8_linear_backward_weight(dweight, dy.q, x.q);
}

std::array<size_t, 3> float8_operand_bytes(const Float8Recipe& recipe, int64_t rows, int64_t in, int64_t out,
                                           int64_t experts) {
  const bool tiles = recipe.scaling == Float8Scaling::blockwise;
  const int64_t B = recipe.block, weights = std::max<int64_t>(experts, 1);
  // An operand's bytes and its scales: (1, B) tiles along a row of `width`, (B, 1) down the rows.
  const auto along = [&](int64_t width) { return rows * width + 4 * (tiles ? rows * width / B : 1); };
  const auto down = [&](int64_t width) {
    return experts > 0 ? along(width) : rows * width + 4 * (tiles ? rows / B * width : 1);
  };
  const int64_t weight = weights * (out * in + 4 * (tiles ? out / B * (in / B) : 1));
  return {static_cast<size_t>(along(in) + weight), static_cast<size_t>(along(out) + weight),
          static_cast<size_t>(down(out) + down(in))};
}

Float8AmaxesKept::Float8AmaxesKept(const LinearStates& states) {
  const Float8Training* fp8 = states.float8();
  if (fp8 == nullptr || fp8->recipe.scaling != Float8Scaling::delayed) return;
  amaxes_ = states.all("fp8_amax");
  kept_.resize(static_cast<size_t>(amaxes_.numel()));
  copy_bytes(kept_.data(), Device::cpu, amaxes_.data, amaxes_.device, amaxes_.bytes());
}

Float8AmaxesKept::~Float8AmaxesKept() {
  if (amaxes_.defined()) copy_bytes(amaxes_.data, amaxes_.device, kept_.data(), Device::cpu, amaxes_.bytes());
}

void end_step_float8(Transformer& model, const std::vector<Communicator*>& holders) {
  const LinearStates& states = model.linear_states();
  const Float8Training* fp8 = states.float8();
  if (fp8 == nullptr || fp8->recipe.scaling != Float8Scaling::delayed) return;
  const Float8Recipe& recipe = fp8->recipe;
  states.reduce_max("fp8_amax", present(holders));
  // On the host: a few floats per layer, the same on every holder after the max.
  const auto host = [&](const char* kind) {
    const Tensor t = states.all(kind);
    std::vector<float> v(static_cast<size_t>(t.numel()));
    copy_bytes(v.data(), Device::cpu, t.data, t.device, t.bytes());
    return std::pair{t, v};
  };
  auto [amax_t, amax] = host("fp8_amax");
  auto [history_t, history] = host("fp8_amax_history");
  auto [scale_t, scale] = host("fp8_scale");
  const size_t H = static_cast<size_t>(recipe.amax_history);
  for (size_t e = 0; e < amax.size() / 3; ++e)
    for (size_t operand = 0; operand < 3; ++operand) {
      float* h = history.data() + (3 * e + operand) * H;
      std::copy_backward(h, h + H - 1, h + H);
      h[0] = amax[3 * e + operand];
      const float used = recipe.amax_compute == "most_recent" ? h[0] : std::accumulate(h, h + H, 0.0f, k::float8_math::amax_of);
      const Format format = operand == 2 ? recipe.gradient_format() : recipe.input_format();
      float& s = scale[3 * e + operand];
      s = k::float8_math::scale_from_amax(used, format, recipe.margin, recipe.pow2_scales, s);
      amax[3 * e + operand] = 0;
    }
  copy_bytes(amax_t.data, amax_t.device, amax.data(), Device::cpu, amax_t.bytes());
  copy_bytes(history_t.data, history_t.device, history.data(), Device::cpu, history_t.bytes());
  copy_bytes(scale_t.data, scale_t.device, scale.data(), Device::cpu, scale_t.bytes());
}

}  // namespace dt
