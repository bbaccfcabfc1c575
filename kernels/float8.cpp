#include "kernels/float8.h"

#include "kernels/dispatch.h"

namespace dt::kernels {

namespace {

// The 2-D view's (R, C).
std::pair<int64_t, int64_t> rows_cols(const Shape& shape) {
  const int64_t C = shape.ndim() == 0 ? 1 : shape[-1];
  return {C == 0 ? 0 : shape.numel() / C, C};
}

void expect_source(std::string_view op, std::string_view arg, const Tensor& x) {
  DT_CHECK(x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16, op, ": ", arg, " is ",
           x.describe(), "; FP8 quantizes f32, bf16 or f16");
}

void expect_f32(std::string_view op, std::string_view arg, const Tensor& t, Device device) {
  expect_dtype(op, arg, t, DType::f32, device);
}

// q's bytes shaped like x, its scale_inv shaped by its tiles, all on x's device.
void expect_quantized(std::string_view op, const Float8Tensor& q, const Tensor& x) {
  float8_format(q.data.dtype);
  DT_CHECK(q.data.device == x.device, op, ": q.data ", q.data.describe(), " is not on ", device_name(x.device));
  expect_shape(op, "q.data", q.data, x.shape);
  expect_f32(op, "q.scale_inv", q.scale_inv, x.device);
  expect_shape(op, "q.scale_inv", q.scale_inv, float8_scale_shape(x.shape, q.tiles));
}

}  // namespace

float8_math::Format float8_format(DType dtype) {
  if (dtype == DType::f8e4m3) return float8_math::Format::e4m3;
  DT_CHECK(dtype == DType::f8e5m2, "FP8 data is f8e4m3 or f8e5m2, not ", dtype_name(dtype));
  return float8_math::Format::e5m2;
}

Shape float8_scale_shape(const Shape& shape, Float8Tiles tiles) {
  if (tiles.is_whole()) return {1};
  const auto [R, C] = rows_cols(shape);
  DT_CHECK(tiles.rows > 0 && tiles.cols > 0, "FP8 tiles of ", tiles.rows, " x ", tiles.cols, " elements");
  DT_CHECK(R % tiles.rows == 0, "FP8 tiles of ", tiles.rows, " rows do not divide the ", R, " rows of ",
           shape.to_string());
  DT_CHECK(C % tiles.cols == 0, "FP8 tiles of ", tiles.cols, " columns do not divide the ", C, " columns of ",
           shape.to_string());
  return {R / tiles.rows, C / tiles.cols};
}

void float8_amax(Tensor amax, Tensor x) {
  constexpr std::string_view op = "float8_amax";
  expect_source(op, "x", x);
  expect_f32(op, "amax", amax, x.device);
  expect_shape(op, "amax", amax, {1});
  DT_DISPATCH_DEVICE(float8_amax, x.device, amax, x);
}

void float8_scale(Tensor scale, Tensor amax, float8_math::Format format, int margin, bool pow2,
                  Float8Fallback fallback) {
  constexpr std::string_view op = "float8_scale";
  expect_f32(op, "scale", scale, amax.device);
  expect_f32(op, "amax", amax, amax.device);
  expect_shape(op, "scale", scale, amax.shape);
  DT_CHECK(margin >= 0 && margin < 126, op, ": margin ", margin, " is not in [0, 126)");
  DT_DISPATCH_DEVICE(float8_scale, amax.device, scale, amax, format, margin, pow2, fallback);
}

void float8_quantize(Float8Tensor q, Tensor x, Tensor scale, Tensor amax) {
  constexpr std::string_view op = "float8_quantize";
  expect_source(op, "x", x);
  DT_CHECK(q.tiles.is_whole(), op, ": tiles of ", q.tiles.rows, " x ", q.tiles.cols,
           " take their scales from their amaxes: float8_quantize_tiles");
  expect_quantized(op, q, x);
  expect_f32(op, "scale", scale, x.device);
  expect_shape(op, "scale", scale, {1});
  if (amax.defined()) {
    expect_f32(op, "amax", amax, x.device);
    expect_shape(op, "amax", amax, {1});
  }
  DT_DISPATCH_DEVICE(float8_quantize, x.device, q, x, scale, amax);
}

void float8_quantize_tiles(Float8Tensor q, Tensor x) {
  constexpr std::string_view op = "float8_quantize_tiles";
  expect_source(op, "x", x);
  DT_CHECK(!q.tiles.is_whole(), op, ": a whole tensor's scale is given: float8_quantize");
  expect_quantized(op, q, x);
  DT_DISPATCH_DEVICE(float8_quantize_tiles, x.device, q, x);
}

void float8_dequantize(Tensor out, Float8Tensor q) {
  constexpr std::string_view op = "float8_dequantize";
  expect_source(op, "out", out);
  expect_quantized(op, q, out);
  DT_DISPATCH_DEVICE(float8_dequantize, out.device, out, q);
}

}  // namespace dt::kernels
