// FP8 quantization: the scaled casts that FP8 training runs its linear layers' GEMMs on
// (kernels/float8_linear.h; the recipes that choose the scales are model/float8_recipe.h).
//
//   q         = satfinite(x · scale)   e4m3 or e5m2 bytes (kernels/float8_math.h)
//   scale_inv = 1 / scale              what a GEMM multiplies its product by: x ≈ q · scale_inv
//
// A scale covers the whole tensor or one tile of it. Tiles are counted on the tensor's 2-D
// view (R, C) = (rows: the product of the leading dims, C: the last dim):
//
//   whole tensor   one scale, given (the tensorwise and delayed recipes: from an amax)
//   (1, B)         B consecutive elements of a row: activations and gradients along the
//                  dimension their GEMM sums over (DeepSeek-V3's 1×128)
//   (B, 1)         B consecutive rows of a column: the same tensors for the weight gradient,
//                  whose GEMM sums over the rows
//   (B, B)         square blocks: weights (DeepSeek-V3's 128×128)
//
// A tiled quantization computes each tile's scale from the tile's own amax, rounded down to a
// power of two (scale_from_amax with pow2, no margin; 1 for a tile of zeros), so dequantizing
// is exact. scale_inv holds one f32 per tile, (R / tile rows, C / tile cols), which R and C must
// divide.
//
// Storage: x and a dequantized out are f32 or bf16 (f16 too); q.data is DType::f8e4m3 or
// f8e5m2 with x's shape; scale, scale_inv and amax are f32. Each kernel sets its outputs.
#pragma once

#include "core/tensor.h"
#include "kernels/float8_math.h"

namespace dt::kernels {

struct Float8Tiles {
  int64_t rows = 0;  // elements of a tile down the rows; 0: the tile is the whole tensor
  int64_t cols = 0;  // along a row
  static Float8Tiles whole() { return {}; }
  bool is_whole() const { return rows == 0; }
};

// A quantized tensor: its bytes, the scale_inv of each tile, and the tiles.
struct Float8Tensor {
  Tensor data;       // DType::f8e4m3 or f8e5m2
  Tensor scale_inv;  // f32: (1) for the whole tensor, else (R / tiles.rows, C / tiles.cols)
  Float8Tiles tiles;
};

// The format a DType::f8e4m3 or f8e5m2 tensor is stored in; throws for any other dtype.
float8_math::Format float8_format(DType dtype);
// The shape of the scale_inv of an x of shape `shape` quantized in `tiles`; throws, naming the
// dimension and the tile, where a tile does not divide it.
Shape float8_scale_shape(const Shape& shape, Float8Tiles tiles);

// amax (1) = max(amax, max over i of |x[i]|), NaN if any element is NaN (so that a NaN reaches
// the loss instead of being scaled away): accumulates, so that one amax can take a step's
// tensors one by one; start it at 0.
void float8_amax(Tensor amax, Tensor x);
// Where an amax is 0, infinite or NaN (no scale can be made from it), the scale is the one the
// tensor had (delayed scaling keeps it), or 1 (current scaling has none: its scale need not be set).
enum class Float8Fallback { previous_scale, one };
// scale[i] = scale_from_amax(amax[i], format, margin, pow2, fallback): a new scale from each
// amax, or the fallback. amax and scale (n) f32.
void float8_scale(Tensor scale, Tensor amax, float8_math::Format format, int margin, bool pow2,
                  Float8Fallback fallback = Float8Fallback::previous_scale);
// Whole tensor: q.data = satfinite(x · scale[0]), q.scale_inv[0] = 1 / scale[0]; where `amax`
// (1) is given, also amax = max(amax, max |x|) as float8_amax, in the same pass over x (delayed
// scaling records the step's amax while it quantizes by the scale it already has).
void float8_quantize(Float8Tensor q, Tensor x, Tensor scale, Tensor amax = {});
// Tiled: each tile's scale from its amax (a power of two), q.data and q.scale_inv set.
void float8_quantize_tiles(Float8Tensor q, Tensor x);
// out = q.data · scale_inv of its tile (exact where scale_inv is a power of two, else rounded
// once to out's storage).
void float8_dequantize(Tensor out, Float8Tensor q);

namespace cpu {
void float8_amax(Tensor amax, Tensor x);
void float8_scale(Tensor scale, Tensor amax, float8_math::Format format, int margin, bool pow2,
                  Float8Fallback fallback);
void float8_quantize(Float8Tensor q, Tensor x, Tensor scale, Tensor amax);
void float8_quantize_tiles(Float8Tensor q, Tensor x);
void float8_dequantize(Tensor out, Float8Tensor q);
}  // namespace cpu

namespace cuda {
void float8_amax(Tensor amax, Tensor x);
void float8_scale(Tensor scale, Tensor amax, float8_math::Format format, int margin, bool pow2,
                  Float8Fallback fallback);
void float8_quantize(Float8Tensor q, Tensor x, Tensor scale, Tensor amax);
void float8_quantize_tiles(Float8Tensor q, Tensor x);
void float8_dequantize(Tensor out, Float8Tensor q);
}  // namespace cuda

}  // namespace dt::kernels
