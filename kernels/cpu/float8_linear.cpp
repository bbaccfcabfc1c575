// FP8 linear products on the CPU: each operand dequantized into an f32 workspace Buffer
// (kernels/float8.h), then kernels/linear.h's f32 product, and a bf16 result rounded once from
// the f32 one. The emulation the GPU's FP8 GEMMs are tested against; its cost is the f32
// product's (no CPU here multiplies FP8).
#include "core/buffer.h"
#include "kernels/convert.h"
#include "kernels/float8_linear.h"
#include "kernels/linear.h"

namespace dt::kernels::cpu {

namespace {

// An f32 workspace tensor of `shape`, with the Buffer that holds it.
struct Scratch {
  Buffer buffer;
  Tensor t;
  explicit Scratch(const Shape& shape)
      : buffer(static_cast<size_t>(shape.numel()) * sizeof(float), MemTag::workspace, Device::cpu, /*zero=*/false),
        t(buffer.view(DType::f32, shape)) {}
};

Scratch dequantized(const Float8Tensor& q) {
  Scratch s(q.data.shape);
  cpu::float8_dequantize(s.t, q);
  return s;
}

// Runs product(result) into an f32 `out` directly, or into f32 scratch rounded once into a bf16 one.
template <typename Product>
void into(Tensor out, Product&& product) {
  if (out.dtype == DType::f32) return product(out);
  Scratch result(out.shape);
  product(result.t);
  convert(out, result.t);
}

}  // namespace

std::array<size_t, 3> float8_linear_scratch_bytes(int64_t rows, int64_t in, int64_t out, DType storage, bool bias) {
  const int64_t widened = storage == DType::f32 ? 0 : 1;  // a 16-bit result or bias has an f32 copy
  const auto f32 = [](int64_t elements) { return static_cast<size_t>(elements) * sizeof(float); };
  return {f32(rows * in + out * in + widened * (rows * out + (bias ? out : 0))),
          f32(rows * out + out * in + widened * rows * in), f32(rows * out + rows * in)};
}

void float8_linear_forward(Tensor out, Float8Tensor inp, Float8Tensor weight, Tensor bias) {
  const Scratch x = dequantized(inp), w = dequantized(weight);
  if (!bias.defined() || bias.dtype == DType::f32) {
    into(out, [&](Tensor result) { linear_forward(result, x.t, w.t, bias); });
    return;
  }
  Scratch b(bias.shape);
  convert(b.t, bias);
  into(out, [&](Tensor result) { linear_forward(result, x.t, w.t, b.t); });
}

void float8_linear_backward_input(Tensor dinp, Float8Tensor dout, Float8Tensor weight) {
  const Scratch dy = dequantized(dout), w = dequantized(weight);
  into(dinp, [&](Tensor result) { linear_backward_input(result, dy.t, w.t); });
}

void float8_linear_backward_weight(Tensor dweight, Float8Tensor dout, Float8Tensor inp) {
  const Scratch dy = dequantized(dout), x = dequantized(inp);
  linear_backward_weight(dweight, Tensor{}, dy.t, x.t);
}

}  // namespace dt::kernels::cpu
