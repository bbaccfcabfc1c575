// The linear layer's three products (kernels/linear.h) on FP8 operands (kernels/float8.h):
//
//   float8_linear_forward:         out(N, OC)     = X(N, C) @ W(OC, C)^T + bias(OC)   (sets out)
//   float8_linear_backward_input:  dinp(N, C)     = DY(N, OC) @ W(OC, C)              (sets dinp)
//   float8_linear_backward_weight: dweight(OC, C) += DY(N, OC)^T @ X(N, C)            (accumulates)
//
// X, W and DY are Float8Tensors: each element is its byte's value times its tile's scale_inv.
// The bias's gradient comes from the unquantized gradient (linear_backward_bias), as
// Transformer Engine takes it.
//
// Tiles each product accepts, by the dimension it sums over (B the tile size, e.g. 128):
//   forward          X whole or (1, B);  W whole or (B, B)
//   backward_input   DY whole or (1, B); W whole or (B, B)
//   backward_weight  DY and X whole or (B, 1), summing over the N rows; or (1, B), the experts'
//                    rows (model/float8_grouped_linear.h), whose scales change along the sum, so
//                    that the product dequantizes them (exactly: tiles have power-of-two scales)
//
// Numerics: the products of the quantized values accumulate in f32, never in FP8 or 16 bits;
// out and dinp are stored as their dtype (bf16 in training, or f32), rounded once, the bias
// added in f32 before; dweight is f32. On the CPU the operands are dequantized into f32 — exact
// for power-of-two scales, one f32 rounding per element otherwise — and multiplied by the f32
// GEMM of kernels/linear.h; cuBLASLt (kernels/cuda/float8_linear.cu) multiplies the bytes and
// scales the f32 sums: the two differ by f32 roundings only.
#pragma once

#include <array>

#include "core/tensor.h"
#include "kernels/float8.h"

namespace dt::kernels {

void float8_linear_forward(Tensor out, Float8Tensor inp, Float8Tensor weight, Tensor bias);
void float8_linear_backward_input(Tensor dinp, Float8Tensor dout, Float8Tensor weight);
void float8_linear_backward_weight(Tensor dweight, Float8Tensor dout, Float8Tensor inp);

namespace cpu {
// The f32 scratch the emulation allocates in each product (forward, input gradient, weight
// gradient) of `rows` rows of `in` -> `out` features stored as `storage`, with a bias where
// `bias`: the dequantized operands, a 16-bit result's f32 one and a 16-bit bias widened. What the
// memory plan counts (plan/memory.h).
std::array<size_t, 3> float8_linear_scratch_bytes(int64_t rows, int64_t in, int64_t out, DType storage, bool bias);
void float8_linear_forward(Tensor out, Float8Tensor inp, Float8Tensor weight, Tensor bias);
void float8_linear_backward_input(Tensor dinp, Float8Tensor dout, Float8Tensor weight);
void float8_linear_backward_weight(Tensor dweight, Float8Tensor dout, Float8Tensor inp);
}  // namespace cpu

namespace cuda {
void float8_linear_forward(Tensor out, Float8Tensor inp, Float8Tensor weight, Tensor bias);
void float8_linear_backward_input(Tensor dinp, Float8Tensor dout, Float8Tensor weight);
void float8_linear_backward_weight(Tensor dweight, Float8Tensor dout, Float8Tensor inp);
}  // namespace cuda

}  // namespace dt::kernels
