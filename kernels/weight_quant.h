// Weight quantization: the formats a trained model's weights are written in to run small, each a
// rule from f32 weights to what a file stores, and back. A weight is a matrix of `rows` output
// channels by `cols` inputs, row-major; every format works along the rows.
//
//   int8   per output channel, symmetric: a row's f32 scale s = amax / 127, its values
//          q = roundf(w · (1 / s)) in [-127, 127]; w' = s · q.
//   q8_0   GGUF's Q8_0: blocks of 32 consecutive values of a row, each with an fp16 scale
//          d = amax / 127 and q = roundf(w · (1 / d)) in [-127, 127]; w' = f16(d) · q.
//   q4_0   GGUF's Q4_0: blocks of 32, d = m / -8 where m is the block's value of largest
//          magnitude (the first of equal ones), q = min(15, trunc(w · (1 / d) + 8.5)) in [0, 15];
//          w' = f16(d) · (q - 8). Byte j of a block holds q[j] in its low nibble, q[j + 16] in
//          its high one.
//
// roundf rounds half away from zero; 1 / d is of the f32 d (before its rounding to fp16), and
// is 0 for a block of zeros. These are llama.cpp's reference quantizers (quantize_row_q8_0_ref,
// quantize_row_q4_0_ref in ggml-quants.c) and the gguf package's (0.19) value for value. One
// result of that C code depends on how it is compiled: Q4_0's w · (1 / d) + 8.5. Here, as in
// the gguf package and in C's own semantics, the product is rounded to f32 and then the sum (two
// roundings; kernels/weight_quant.cpp is compiled with -ffp-contract=off so that it stays so). A
// llama.cpp built by GCC with FMA hardware (its default -ffp-contract=fast, llama.cpp's native
// build) fuses them into one rounding, and a value whose sum lies within an f32 rounding of an
// integer can get the next nibble there: 74 of 640 million normally distributed values, one in
// nine million (weight_quant_test.cpp finds such a value and checks which nibble it gets). Q8_0 has no such case. The fp16 rounding of d is
// to nearest even (F16C's, and ggml's portable conversion alike).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace dt::kernels {

enum class WeightFormat { int8, q8_0, q4_0 };
// "int8", "q8_0", "q4_0".
std::string_view weight_format_name(WeightFormat format);
// Parses a name; throws dt::Error naming the formats there are.
WeightFormat parse_weight_format(std::string_view name);
// Values of a row a format quantizes together: 32 for q8_0 and q4_0, which the row length must
// be a multiple of; 1 for int8 (any length).
int64_t weight_format_block(WeightFormat format);

inline constexpr int64_t kGgufBlock = 32;

struct BlockQ8_0 {
  uint16_t d;  // fp16
  int8_t qs[kGgufBlock];
};
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[kGgufBlock / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "GGUF's block layouts");

// x.size() a multiple of 32, out of x.size() / 32 blocks.
void quantize_q8_0(std::span<const float> x, std::span<BlockQ8_0> out);
void dequantize_q8_0(std::span<const BlockQ8_0> blocks, std::span<float> out);
void quantize_q4_0(std::span<const float> x, std::span<BlockQ4_0> out);
void dequantize_q4_0(std::span<const BlockQ4_0> blocks, std::span<float> out);

// w of rows × cols; q of the same size, scales of `rows`.
void quantize_int8_rows(std::span<const float> w, int64_t rows, std::span<int8_t> q, std::span<float> scales);
void dequantize_int8_rows(std::span<const int8_t> q, std::span<const float> scales, std::span<float> out);

// int8 over a slice of each row (a row-parallel layer's shard of the weight): called with the
// largest magnitude of each of the slice's rows, it makes each the largest over the whole row
// (the maximum over the ranks holding its slices), so that the scale is the whole row's.
using RowAmaxCompletion = std::function<void(std::span<float>)>;

// What quantizing w (rows × cols) in `format` and dequantizing gives, into out (which may be w):
// the weights a quantization-aware forward computes with, equal to what a file of that format
// holds once read back. `complete_row_amax` where w is a slice of each row (int8 only: GGUF's
// blocks lie whole in a slice).
void fake_quantize(WeightFormat format, std::span<const float> w, int64_t rows, std::span<float> out,
                   const RowAmaxCompletion& complete_row_amax = {});
// The same on a weight tensor (rows, cols) of f32, bf16 or f16 on the host, into `out` of its
// dtype and shape: a 16-bit weight is widened, fake-quantized, and rounded back to its dtype.
void fake_quantize(WeightFormat format, Tensor w, Tensor out, const RowAmaxCompletion& complete_row_amax = {});

}  // namespace dt::kernels
